package hold

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/election"
)

// healthSlack is how long, beyond --grace, a hold may outlive its
// validity before /healthz fails: the command's stop and the release.
const healthSlack = 5 * time.Second

// metricsServer serves, for lock and elect, /metrics (the library's
// metrics, Go and process metrics, on a registry of its own), /healthz
// (election.HealthCheck) and /leader (200 while holding, 503 otherwise).
type metricsServer struct {
	reg  *prometheus.Registry
	hc   *election.HealthCheck
	srv  *http.Server
	addr net.Addr
	wg   sync.WaitGroup
}

func addMetricsFlag(f *pflag.FlagSet, addr *string) {
	f.StringVar(addr, "metrics-listen", "", "serve /metrics, /healthz and /leader on this address (host:port), e.g. :9090")
}

// startMetrics listens on addr before anything is asked of etcd, so that a
// taken port fails at once; nil (which every method accepts) when addr is
// empty.
func startMetrics(addr string, grace time.Duration) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, cmdutil.UsageErrorf("--metrics-listen %q: want host:port: %v", addr, err)
	}
	hc, err := election.NewHealthCheck(grace + healthSlack)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	m := &metricsServer{reg: prometheus.NewRegistry(), hc: hc, addr: ln.Addr()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	// OpenMetrics when asked for: the only format with exemplars, the
	// trace IDs of the waits and holds behind the histograms.
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.Handle("GET /healthz", hc)
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !hc.Held() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not holding")
			return
		}
		fmt.Fprintln(w, "holding")
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		_ = m.srv.Serve(ln) // returns ErrServerClosed on close
	}()
	return m, nil
}

// registerer is the library's Registerer: nil (the default, none) without
// a server.
func (m *metricsServer) registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.reg
}

// track counts v as held for /healthz and /leader until done is called.
func (m *metricsServer) track(v election.Validity) (done func()) {
	if m == nil {
		return func() {}
	}
	return m.hc.Track(v)
}

func (m *metricsServer) close() {
	if m == nil {
		return
	}
	_ = m.srv.Close()
	m.wg.Wait()
}
