// Command singleton is the smallest service that must run on exactly one
// replica: it campaigns in an election with baton and does its work only
// while it leads. Run three replicas; one works, two wait. It serves
// /healthz (election.HealthCheck, for a liveness probe), /leader (200 while
// leading) and /metrics on --listen.
//
// Configuration, as deploy/kubernetes/ sets it: BATON_ENDPOINTS
// (comma-separated), BATON_CACERT, BATON_CERT and BATON_KEY (client TLS,
// optional), BATON_NAMESPACE, and POD_NAME (the value this replica
// campaigns with; the host name by default).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/rbac"
)

// config is what the program reads from its flags and environment.
type config struct {
	endpoints []string
	tls       rbac.TLSFiles
	namespace string
	name      string
	value     string
	listen    string
	ttl       time.Duration
	tick      time.Duration
}

func main() {
	cfg := config{
		endpoints: strings.Split(env("BATON_ENDPOINTS", "127.0.0.1:2379"), ","),
		tls:       rbac.TLSFiles{CA: os.Getenv("BATON_CACERT"), Cert: os.Getenv("BATON_CERT"), Key: os.Getenv("BATON_KEY")},
		namespace: env("BATON_NAMESPACE", "baton"),
		value:     env("POD_NAME", hostname()),
	}
	flag.StringVar(&cfg.name, "election", "singleton", "election name")
	flag.StringVar(&cfg.listen, "listen", ":9090", "address of /healthz, /leader and /metrics")
	flag.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lease TTL")
	flag.DurationVar(&cfg.tick, "tick", 5*time.Second, "how often the leader does its work")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, cfg, log, nil); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("singleton stopped", "error", err)
		os.Exit(1)
	}
}

// run serves the health endpoints and leads until ctx ends. ready, if
// not nil, receives the listener's address once it serves.
func run(ctx context.Context, cfg config, log *slog.Logger, ready chan<- net.Addr) error {
	var tlsCfg *tls.Config
	if cfg.tls.Cert != "" || cfg.tls.CA != "" {
		c, err := cfg.tls.ClientConfig()
		if err != nil {
			return fmt.Errorf("etcd client TLS: %w", err)
		}
		tlsCfg = c
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.endpoints, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()

	reg := prometheus.NewRegistry()
	e, err := election.New(cli, cfg.name, election.WithNamespace(cfg.namespace), election.WithTTL(cfg.ttl),
		election.WithRegisterer(reg))
	if err != nil {
		return err
	}
	defer e.Close()
	// Work gets a TTL to notice its context has ended before the probe fails.
	hc, err := election.NewHealthCheck(cfg.ttl)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", hc)
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, _ *http.Request) {
		if !hc.Held() {
			http.Error(w, "not leading", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "leading")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-served }()
	if ready != nil {
		ready <- ln.Addr()
	}

	log.Info("campaigning", "election", cfg.name, "value", cfg.value)
	return e.Run(ctx, cfg.value, hc.Wrap(func(ctx context.Context, t *election.Term) error {
		log.Info("leading", "token", t.Token().String())
		tick := time.NewTicker(cfg.tick)
		defer tick.Stop()
		for {
			// The work: anything the resource accepts with t.Token() (see
			// package fencing), stopped as soon as ctx ends.
			log.Info("working", "token", t.Token().String())
			select {
			case <-ctx.Done():
				log.Info("stopped leading", "cause", context.Cause(ctx))
				return nil
			case <-tick.C:
			}
		}
	}))
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "singleton"
	}
	return h
}
