package ui

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

//go:embed ui_assets
var uiAssets embed.FS

type Options struct {
	Listen   string
	TLSCert  string
	TLSKey   string
	Insecure bool
}

func NewCmdUI(g *cmdutil.Env) *cobra.Command {
	var o Options
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a read-only live page of the namespace's elections, locks, timeline and audit trail",
		Long: `Serve a read-only web page of the namespace: every election (leader, value,
token, leading since, candidates in order, each lease's TTL left) and lock
(holder, token, held for, TTL left, waiters), a timeline of the holders of
each, and the audit trail. Semaphores show their holders out of the limit and
their waiters, read/write locks their readers or writer and their waiters.
Shard groups show their live members and how many shards each owns, the
unowned shards, and the last 20 moves seen while baton ui runs.
The page is live: etcd watches push every change to it as server-sent events;
it reconnects by itself.

Whether etcd answers is checked every second with a linearizable read that
must answer within a second: when it does not, the page says "etcd
unreachable since HH:MM:SS" and greys out what it can no longer vouch for,
and when etcd answers again it reads everything afresh and is live again,
without a reload. baton ui starts and serves the page even while etcd is
unreachable (it connects when etcd answers); a refusal (TLS, authentication,
permission) still ends it with its exit code.

The page has no login of its own and shows fencing tokens. It listens on
loopback by default; any other address needs --tls-cert and --tls-key, or
--insecure-listen to serve plaintext anyway (behind an authenticating
proxy, say).`,
		Example: `  baton ui
  baton ui --namespace payments --listen 127.0.0.1:9000
  baton ui --listen :8443 --tls-cert ui.pem --tls-key ui-key.pem`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return runUI(cmd, g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "address to serve the page on (host:port)")
	f.StringVar(&o.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM)")
	f.StringVar(&o.TLSKey, "tls-key", "", "the --tls-cert's private key (PEM)")
	f.BoolVar(&o.Insecure, "insecure-listen", false, "allow plaintext HTTP on an address beyond loopback")
	return cmd
}

func (o Options) Validate() error {
	host, _, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return cmdutil.UsageErrorf("--listen %q: want host:port: %v", o.Listen, err)
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return cmdutil.UsageErrorf("--tls-cert and --tls-key go together")
	}
	if !loopbackHost(host) && o.TLSCert == "" && !o.Insecure {
		return cmdutil.UsageErrorf("--listen %q is beyond loopback: give --tls-cert and --tls-key, or --insecure-listen to serve plaintext anyway", o.Listen)
	}
	return nil
}

// loopbackHost reports whether host names only loopback addresses.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runUI(cmd *cobra.Command, g *cmdutil.Env, o Options) error {
	var tlsCfg *tls.Config
	if o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return cmdutil.WithCode(cmdutil.ExitUsage, fmt.Errorf("--tls-cert/--tls-key: %w", err))
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ictx, stop := cmdutil.Interruptible(cmd.Context())
	defer stop()
	ctx, refused := context.WithCancel(ictx)
	defer refused()
	// An unreachable etcd is what the page is for: serve it anyway, and
	// connect in the background. A refusal is final: exit with it.
	cli, cerr := g.Client(ctx)
	if cerr != nil && cmdutil.ExitCode(cerr) != cmdutil.ExitUnavailable {
		return cerr
	}
	if cerr != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "baton: %v; serving the page anyway, it connects when etcd answers\n", cerr)
	} else {
		defer cli.Close()
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	st := NewState(cli, g.Namespace, g.IO.Now)
	st.connect = g.Client
	if cli == nil {
		st.setReachable(false, cerr.Error())
	}
	host, _, _ := net.SplitHostPort(o.Listen)
	srv := &http.Server{Handler: Handler(st, loopbackHost(host) && tlsCfg == nil), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}

	var wg sync.WaitGroup
	wg.Add(2)
	var runErr error
	go func() {
		defer wg.Done()
		if runErr = st.Run(ctx); runErr != nil {
			refused() // the page has shown why; exit with it
		}
	}()
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	url := scheme + "://" + ln.Addr().String() + "/"
	fmt.Fprintf(cmd.ErrOrStderr(), "baton: serving namespace %s on %s (interrupt to stop)\n", cmdutil.SafeQ(g.Namespace), url)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	_ = srv.Shutdown(sctx) // streams end with ctx
	cancel()
	_ = srv.Close()
	wg.Wait()
	return runErr // nil on an interrupt, the way the page is meant to stop
}

// Handler serves the page, its assets, /state.json and /events. With
// checkHost (plaintext on loopback) it refuses requests whose Host is not
// a loopback name, so that a web page elsewhere cannot read it through DNS
// rebinding.
func Handler(st *State, checkHost bool) http.Handler {
	assets, _ := fs.Sub(uiAssets, "ui_assets")
	files := http.FileServerFS(assets)
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", files)
	mux.Handle("GET /ui.js", files)
	mux.Handle("GET /ui.css", files)
	mux.HandleFunc("GET /state.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st.Snapshot())
	})
	mux.HandleFunc("GET /events", st.serveEvents)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if checkHost && !loopbackRequestHost(r.Host) {
			http.Error(w, "baton ui: this address serves loopback only (Host not allowed)", http.StatusMisdirectedRequest)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func loopbackRequestHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return loopbackHost(host) || strings.HasSuffix(host, ".localhost")
}

// serveEvents streams the snapshot as server-sent events: at once, then
// on every change, with a comment every 15 s so that proxies keep the
// stream open and a gone page is noticed.
func (st *State) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	done := st.View()
	defer done()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	if _, err := fmt.Fprint(w, "retry: 1000\n\n"); err != nil {
		return
	}
	for {
		changed := st.Changed()
		b, err := json.Marshal(st.Snapshot())
		if err != nil {
			return
		}
		// encoding/json escapes newlines in strings: b is one line.
		if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
			return
		}
		flusher.Flush()
		for wait := true; wait; {
			select {
			case <-r.Context().Done():
				return
			case <-changed:
				wait = false
			case <-ping.C:
				if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
					return
				}
				flusher.Flush()
			}
		}
	}
}
