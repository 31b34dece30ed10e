package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
)

// DefaultListen is where `baton serve` listens without --listen.
const DefaultListen = "127.0.0.1:9379"

// Options are the flags of `baton serve`.
type Options struct {
	Listen              []string
	TLSCert, TLSKey, CA string
	Insecure            bool
	Dev                 bool
	MaxHolds            int
	MaxHoldsPerIdentity int
	MaxTTL              time.Duration
	Policy              string
	ShutdownTimeout     time.Duration
	ReadHeaderTimeout   time.Duration
	ReadTimeout         time.Duration
	IdleTimeout         time.Duration
}

func NewCmdServe(g *cmdutil.Env) *cobra.Command {
	var o Options
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR]... [--dev] [--tls-cert F --tls-key F --client-ca F]",
		Short: "Serve locks to any language over gRPC and HTTP/JSON (docs/serve.md)",
		Long: `Serve baton's locks over gRPC, gRPC-Web and Connect's HTTP/JSON on each
--listen address (host:port, or unix:///path for a sidecar's socket), with
one etcd client, grpc.health.v1 and /metrics. A Hold stream's lock (a
Lead stream's term) lasts while the stream is open and the caller's
heartbeats arrive; the stream says lost (ended), with its cause, before
anyone else can acquire (lead).

With --tls-cert, --tls-key and --client-ca every TCP caller must present a
client certificate, whose CN is its identity. With --policy, every call is
checked against that namespace policy (the file baton rbac apply takes).
--dev serves on an embedded etcd of its own, for a one-command try.

SIGINT or SIGTERM ends every hold and term (lost: server shutdown) and deletes its
key before the server exits.

A caller that sends its request headers slower than --read-header-timeout,
its whole request slower than --read-timeout (a stream, once its request
is read, lasts as long as its hold), or keeps a connection open with no
call for --idle-timeout, is cut off. A
message of a Hold or Lead stream that its caller does not take within a
twentieth of the TTL ends the hold; its key is deleted once the validity
the caller was given has run out.

With OTEL_EXPORTER_OTLP_ENDPOINT set, each call's span (a Hold or Lead
stream's, a unary call's, an Observe stream's) is exported over OTLP/gRPC,
a child of the caller's traceparent header.`,
		Example: `  baton serve --dev
  baton serve --listen 127.0.0.1:9379 --listen unix:///run/baton/baton.sock
  curl -s localhost:9379/baton.v1.BatonService/Inspect -H 'Content-Type: application/json' -d '{"locksPrefix":""}'`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return Run(ctx, g, o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.Listen, "listen", []string{DefaultListen}, "listen on ADDR (host:port, or unix:///path); repeat for several")
	f.StringVar(&o.TLSCert, "tls-cert", "", "serve TCP over TLS with this certificate (with --tls-key and --client-ca)")
	f.StringVar(&o.TLSKey, "tls-key", "", "the key of --tls-cert")
	f.StringVar(&o.CA, "client-ca", "", "require client certificates signed by this CA; the CN is the caller's identity")
	f.BoolVar(&o.Insecure, "insecure-listen", false, "allow plaintext on an address beyond loopback")
	f.BoolVar(&o.Dev, "dev", false, "serve on an embedded etcd of its own (temporary data), for a try")
	f.IntVar(&o.MaxHolds, "max-holds", DefaultMaxHolds, "Hold and Lead streams open at once (waiting or holding); more are RESOURCE_EXHAUSTED")
	f.IntVar(&o.MaxHoldsPerIdentity, "max-holds-per-identity", DefaultMaxHoldsPerIdentity, "Hold and Lead streams open at once per identity")
	f.DurationVar(&o.MaxTTL, "max-ttl", mutex.DefaultMaxTTL, "the largest TTL a hold may ask for")
	f.StringVar(&o.Policy, "policy", "", "check every call against this namespace policy (YAML or JSON, as baton rbac apply takes)")
	f.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "how long SIGTERM waits for holds to end before the leases are revoked")
	f.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", DefaultReadHeaderTimeout, "cut off a connection whose request headers take longer (a slow or stalled caller)")
	f.DurationVar(&o.ReadTimeout, "read-timeout", DefaultReadTimeout, "cut off a request whose headers and body take longer to arrive (a stream, once its request is read, is not)")
	f.DurationVar(&o.IdleTimeout, "idle-timeout", DefaultIdleTimeout, "close a connection with no request or stream open for this long")
	return cmd
}

// listener is one --listen address, listening.
type listener struct {
	ln  net.Listener
	url string // as printed: http://, https:// or unix://
	tls bool
}

func (o Options) validate() error {
	switch {
	case len(o.Listen) == 0:
		return cmdutil.UsageErrorf("--listen: at least one address")
	case o.MaxHolds < 1:
		return cmdutil.UsageErrorf("--max-holds %d: at least 1", o.MaxHolds)
	case o.MaxHoldsPerIdentity < 1:
		return cmdutil.UsageErrorf("--max-holds-per-identity %d: at least 1", o.MaxHoldsPerIdentity)
	case o.MaxTTL < mutex.MinTTL || o.MaxTTL%time.Second != 0:
		return cmdutil.UsageErrorf("--max-ttl %v: whole seconds, at least %v", o.MaxTTL, mutex.MinTTL)
	case o.ShutdownTimeout <= 0:
		return cmdutil.UsageErrorf("--shutdown-timeout %v: must be positive", o.ShutdownTimeout)
	case o.ReadHeaderTimeout <= 0:
		return cmdutil.UsageErrorf("--read-header-timeout %v: must be positive", o.ReadHeaderTimeout)
	case o.ReadTimeout <= 0:
		return cmdutil.UsageErrorf("--read-timeout %v: must be positive", o.ReadTimeout)
	case o.IdleTimeout <= 0:
		return cmdutil.UsageErrorf("--idle-timeout %v: must be positive", o.IdleTimeout)
	}
	if n := btoi(o.TLSCert != "") + btoi(o.TLSKey != "") + btoi(o.CA != ""); n != 0 && n != 3 {
		return cmdutil.UsageErrorf("--tls-cert, --tls-key and --client-ca go together")
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Run serves until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, g *cmdutil.Env, o Options, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	cfg := Config{Namespace: g.Namespace, MaxTTL: o.MaxTTL, MaxHolds: o.MaxHolds, MaxHoldsPerIdentity: o.MaxHoldsPerIdentity}
	if o.Policy != "" {
		p, err := rbac.LoadFile(o.Policy)
		if err != nil {
			return cmdutil.WithCode(cmdutil.ExitUsage, fmt.Errorf("--policy: %w", err))
		}
		cfg.Policy, cfg.PolicyFile = p, o.Policy
	}
	var tlsCfg *tls.Config
	if o.TLSCert != "" {
		var err error
		if tlsCfg, err = (rbac.TLSFiles{CA: o.CA, Cert: o.TLSCert, Key: o.TLSKey}).ServerConfig(); err != nil {
			return cmdutil.WithCode(cmdutil.ExitUsage, err)
		}
	}
	lns, err := listen(o, tlsCfg)
	if err != nil {
		return err
	}
	defer func() {
		for _, l := range lns {
			_ = l.ln.Close()
		}
	}()

	var cli *clientv3.Client
	if o.Dev {
		srv, err := embedetcd.New(embedetcd.Config{Name: "baton-serve-dev"})
		if err != nil {
			return fmt.Errorf("start etcd: %w", err)
		}
		defer srv.Stop()
		if cli, err = srv.NewClient(); err != nil {
			return err
		}
		fmt.Fprintf(out, "etcd (embedded, --dev, temporary data) at %s\n", srv.Endpoint())
	} else if cli, err = g.Client(ctx); err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Client, cfg.Registerer = cli, reg
	tr := cmdutil.StartTracing(ctx, g.IO.Getenv, g.IO.Err)
	defer tr.Flush(g.IO.Err)
	cfg.TracerProvider = tr.Provider
	s, err := New(cfg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", s.Handler())
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	errc := make(chan error, len(lns))
	var servers []*http.Server
	var wg sync.WaitGroup
	for _, l := range lns {
		hs := httpServer(mux, l.tls, tlsCfg, timeouts{readHeader: o.ReadHeaderTimeout, read: o.ReadTimeout, idle: o.IdleTimeout})
		servers = append(servers, hs)
		wg.Add(1)
		go func(l listener) {
			defer wg.Done()
			var err error
			if l.tls {
				err = hs.ServeTLS(l.ln, "", "")
			} else {
				err = hs.Serve(l.ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", l.url, err)
			}
		}(l)
		fmt.Fprintf(out, "serving on %s\n", l.url)
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	fmt.Fprintln(out, "shutting down: ending every hold")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ShutdownTimeout)
	defer cancel()
	err = s.Shutdown(sctx)
	// Every stream ended: the HTTP servers close their connections, at
	// once (an HTTP/2 connection waits up to a second after its GOAWAY for
	// its caller to close it).
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer hcancel()
	for _, hs := range servers {
		wg.Go(func() {
			if hs.Shutdown(hctx) != nil {
				_ = hs.Close()
			}
		})
	}
	wg.Wait()
	return errors.Join(runErr, err)
}

// DefaultShutdownTimeout is --shutdown-timeout's default: how long a
// shutdown waits for every stream to end (lost sent, then its key deleted
// by its guarded delete) before the leases are revoked. Measured with
// 10,000 streams open (the default --max-holds; 5,000 held, 5,000
// waiting): every lost arrived within 0.5 to 0.65 s and every stream
// ended in 1.3 to 1.7 s on a lightly loaded 2-core machine, ended in 4.7
// to 7.2 s on a busy one. Each
// stream ends in its own handler, all at once; the time is etcd's, about
// three writes per held stream and one per waiting one. Twice the
// busiest measure, so that a loaded server still ends its streams itself.
const DefaultShutdownTimeout = 15 * time.Second

// Defaults of --read-header-timeout, --read-timeout and --idle-timeout.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 5 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
)

// timeouts are the HTTP server's bounds on a slow or idle caller. None
// touches a stream whose request was read: a hold's caller is judged by
// its heartbeats and by the write deadline of its stream's messages
// (sendTimeout), never by a connection-wide read or write timeout, which
// would end holds whose callers still believe they hold.
type timeouts struct {
	// readHeader bounds the reading of a request's headers (HTTP/1.1, and
	// the h2c preface): a caller that trickles them (slowloris) is cut off.
	readHeader time.Duration
	// read bounds the reading of a request (http.Server.ReadTimeout):
	// over HTTP/1.1 its headers and body, from its first byte; over
	// HTTP/2 its body, from its headers' end. A caller that
	// sends its headers and then trickles its body is cut off, over
	// HTTP/1.1 by the connection's read deadline (the connection closed),
	// over HTTP/2 by the stream's (the stream reset). Once a request's
	// body is read to its end, neither touches its stream: over HTTP/1.1
	// net/http lifts the deadline there (connReader.startBackgroundRead,
	// the read that notices a caller's hang-up), and over HTTP/2 the
	// stream's deadline only fails its body's reads
	// (http2stream.onReadTimeout, a no-op once the body ended). A Hold,
	// Lead or Shards stream thus lasts as long as its hold.
	read time.Duration
	// idle closes a connection with no request in flight (HTTP/1.1
	// keep-alive) or no stream open (HTTP/2: also one whose HEADERS and
	// CONTINUATION frames trickle, since no stream opens until they end).
	idle time.Duration
}

// httpServer serves h on one listener: HTTP/1.1 and HTTP/2, the latter
// over TLS or, on plaintext, as h2c (gRPC without TLS).
func httpServer(h http.Handler, useTLS bool, tlsCfg *tls.Config, t timeouts) *http.Server {
	hs := &http.Server{Handler: h, ConnContext: connContext, ReadHeaderTimeout: t.readHeader, ReadTimeout: t.read, IdleTimeout: t.idle, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	if useTLS {
		hs.Protocols.SetHTTP2(true)
		hs.TLSConfig = tlsCfg
	} else {
		hs.Protocols.SetUnencryptedHTTP2(true)
	}
	return hs
}

// listen opens every --listen address before etcd is asked anything, so
// that a taken port or a bad address fails at once.
func listen(o Options, tlsCfg *tls.Config) ([]listener, error) {
	var out []listener
	fail := func(err error) ([]listener, error) {
		for _, l := range out {
			_ = l.ln.Close()
		}
		return nil, err
	}
	for _, a := range o.Listen {
		if path, ok := strings.CutPrefix(a, "unix://"); ok {
			if path == "" {
				return fail(cmdutil.UsageErrorf("--listen %q: unix:// needs a path", a))
			}
			if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
				_ = os.Remove(path) // a socket a previous run left
			}
			ln, err := net.Listen("unix", path)
			if err != nil {
				return fail(fmt.Errorf("--listen %s: %w", a, err))
			}
			if err := os.Chmod(path, 0o600); err != nil {
				_ = ln.Close()
				return fail(err)
			}
			out = append(out, listener{ln: ln, url: "unix://" + path})
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return fail(cmdutil.UsageErrorf("--listen %q: want host:port or unix:///path: %v", a, err))
		}
		if tlsCfg == nil && !o.Insecure && !loopbackHost(host) {
			return fail(cmdutil.UsageErrorf("--listen %q is beyond loopback: give --tls-cert, --tls-key and --client-ca, or --insecure-listen to serve plaintext anyway", a))
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fail(fmt.Errorf("--listen %s: %w", a, err))
		}
		scheme := "http"
		if tlsCfg != nil {
			scheme = "https"
		}
		out = append(out, listener{ln: ln, url: scheme + "://" + ln.Addr().String(), tls: tlsCfg != nil})
	}
	return out, nil
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
