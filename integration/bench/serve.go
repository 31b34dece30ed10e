package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/cmd/baton/serve"
	"github.com/batonhq/baton/integration/harness"
)

// The serve-* workloads put `baton serve` beside the Go library in the
// same run: the baton column is the service (the serve package's Server,
// as `baton serve` runs it, on the bench's etcd, in a child process of
// baton-bench when Config.ServeCommand is set), called over gRPC and over
// Connect's HTTP/JSON by the generated client; the raw column is the
// library (package mutex through harness.Impls[0]), not etcd's
// concurrency.

// serveProtocols are the ways a remote caller speaks to the service: gRPC
// over HTTP/2 without TLS (h2c), and Connect's protocol with its JSON
// codec over HTTP/1.1, as a caller on a standard library does.
var serveProtocols = []string{"gRPC", "HTTP/JSON"}

// serveTTL is the TTL of the service's holds in the workloads: long
// enough that none needs a heartbeat while measured.
const serveTTL = 60 * time.Second

// serveClient returns a client of the service at url speaking proto, and
// a func closing its idle connections.
func serveClient(url, proto string) (batonv1connect.BatonServiceClient, func()) {
	tr := &http.Transport{Protocols: new(http.Protocols), MaxIdleConnsPerHost: 16}
	var opts []connect.ClientOption
	if proto == "gRPC" {
		tr.Protocols.SetUnencryptedHTTP2(true)
		opts = append(opts, connect.WithGRPC())
	} else {
		tr.Protocols.SetHTTP1(true)
		opts = append(opts, connect.WithProtoJSON())
	}
	return batonv1connect.NewBatonServiceClient(&http.Client{Transport: tr}, url, opts...), tr.CloseIdleConnections
}

// remoteHold is one Hold stream that got held.
type remoteHold struct {
	st     *connect.ServerStreamForClient[batonv1.HoldResponse]
	id     string
	cancel context.CancelFunc
}

// holdRemote opens a Hold of name and returns once held has arrived.
func holdRemote(ctx context.Context, c batonv1connect.BatonServiceClient, name string) (*remoteHold, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := c.Hold(ctx, connect.NewRequest(&batonv1.HoldRequest{Names: []string{name}, Ttl: durationpb.New(serveTTL)}))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("hold %s: %w", name, err)
	}
	if !st.Receive() {
		err := st.Err()
		_ = st.Close()
		cancel()
		return nil, fmt.Errorf("hold %s: the stream ended before held: %v", name, err)
	}
	held := st.Msg().GetHeld()
	if held == nil {
		_ = st.Close()
		cancel()
		return nil, fmt.Errorf("hold %s: the first message is %v, not held", name, st.Msg())
	}
	return &remoteHold{st: st, id: held.GetHoldId(), cancel: cancel}, nil
}

// release calls Release, which returns once the key is deleted.
func (h *remoteHold) release(ctx context.Context, c batonv1connect.BatonServiceClient) error {
	_, err := c.Release(ctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: h.id}))
	return err
}

// finish reads the stream to its end (released, then the end) and closes
// it; after an error, or to drop the hold, it cancels the stream.
func (h *remoteHold) finish() error {
	defer h.cancel()
	released := false
	for h.st.Receive() {
		released = released || h.st.Msg().GetReleased() != nil
	}
	err := errors.Join(h.st.Err(), h.st.Close())
	if err == nil && !released {
		err = errors.New("the stream ended without released")
	}
	return err
}

// drop ends the stream without a Release: the server deletes the key.
func (h *remoteHold) drop() {
	h.cancel()
	_ = h.st.Close()
}

// floorCall is the round-trip floor of a protocol: a unary call the
// server answers without etcd (a Heartbeat of an unknown hold_id, which is
// NOT_FOUND).
func floorCall(ctx context.Context, c batonv1connect.BatonServiceClient) error {
	_, err := c.Heartbeat(ctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: strings.Repeat("0", 32)}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil
	}
	if err == nil {
		err = errors.New("a heartbeat of no hold succeeded")
	}
	return err
}

// serveCycle: baton column, a Hold and its Release in a loop on one name
// (from the request until the stream ended), over each protocol, with the
// etcd requests the server sent per cycle (lease renewals aside), and the
// round trip's floor measured after it over the same connections; raw
// column, the library's mutex Lock and Unlock on one shared session (as
// the service's holds share one), its one run shown in each protocol's
// rows.
func serveCycle(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	if impl.Name() != "baton" {
		vs, err := lockUnlockShared(ctx, env, harness.Impls[0], name)
		if err != nil {
			return nil, err
		}
		for i := range vs {
			if vs[i].Metric == "requests/cycle" {
				vs[i].Metric = "etcd requests/cycle"
			}
		}
		return perProtocol(vs, "cycles/s", "cycle p50 ms", "cycle p99 ms", "etcd requests/cycle"), nil
	}
	out, err := onEachProtocol(ctx, env, false, func(srv *served, p string) ([]Value, error) {
		var out []Value
		c, closeIdle := serveClient(srv.url, p)
		defer closeIdle() // also called at once after the round trips: idempotent
		cycle := releaseCycle(ctx, c, name)
		// The first cycle opens the connections and the server's session.
		if err := cycle(); err != nil {
			return nil, err
		}
		s0, err := srv.stats(ctx)
		if err != nil {
			return nil, err
		}
		lat, elapsed, err := loopFor(ctx, env.cfg.Duration, cycle)
		if err != nil {
			return nil, err
		}
		s1, err := srv.stats(ctx)
		if err != nil {
			return nil, err
		}
		floor, _, err := loopFor(ctx, min(env.cfg.Duration/3, time.Second), func() error { return floorCall(ctx, c) })
		closeIdle()
		if err != nil {
			return nil, fmt.Errorf("round trip: %w", err)
		}
		l, f := harness.MsAll(lat), harness.MsAll(floor)
		if p == "gRPC" {
			// Released by closing the stream: one call a cycle, the key
			// deleted while the next Hold is on its way (which, on the
			// next session, queues behind it in etcd). Over HTTP/1.1 a
			// stream is closed only with its connection, so gRPC alone.
			c2, closeIdle2 := serveClient(srv.url, p)
			closing, _, err := loopFor(ctx, env.cfg.Duration/2, func() error {
				h, err := holdRemote(ctx, c2, name)
				if err == nil {
					h.drop()
				}
				return err
			})
			closeIdle2()
			if err != nil {
				return nil, fmt.Errorf("closing: %w", err)
			}
			out = append(out, Value{Metric: "closing cycle p50 ms (" + p + ")", V: harness.Percentile(harness.MsAll(closing), 50)})
		}
		return append(out,
			Value{Metric: "cycles/s (" + p + ")", V: float64(len(lat)) / elapsed.Seconds()},
			Value{Metric: "cycle p50 ms (" + p + ")", V: harness.Percentile(l, 50)},
			Value{Metric: "cycle p99 ms (" + p + ")", V: harness.Percentile(l, 99)},
			Value{Metric: "etcd requests/cycle (" + p + ")", V: float64(s1.EtcdRequests-s0.EtcdRequests) / float64(max(len(lat), 1))},
			Value{Metric: "round trip p50 ms (" + p + ")", V: harness.Percentile(f, 50)},
		), nil
	})
	if err != nil {
		return nil, err
	}
	floor, err := floorCycles(ctx, env, name)
	return append(out, floor...), err
}

// releaseCycle is one cycle of serveCycle: a Hold of name, its Release,
// the stream read to its end.
func releaseCycle(ctx context.Context, c batonv1connect.BatonServiceClient, name string) func() error {
	return func() error {
		h, err := holdRemote(ctx, c, name)
		if err != nil {
			return err
		}
		if err := h.release(ctx, c); err != nil {
			h.drop()
			return err
		}
		return h.finish()
	}
}

// floorCycles runs serveCycle's cycle against floorHold (in a child
// process as the service's server): the protocol's floor of a Hold and its
// Release, with a lock in memory.
func floorCycles(ctx context.Context, env *env, name string) ([]Value, error) {
	out, err := onEachProtocol(ctx, env, true, func(srv *served, p string) ([]Value, error) {
		c, closeIdle := serveClient(srv.url, p)
		defer closeIdle()
		lat, _, err := loopFor(ctx, env.cfg.Duration/2, releaseCycle(ctx, c, name))
		if err != nil {
			return nil, err
		}
		return []Value{{Metric: "floor cycle p50 ms (" + p + ")", V: harness.Percentile(harness.MsAll(lat), 50)}}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	return out, nil
}

// onEachProtocol starts the service's server (with floor, floorHold's)
// and measures each protocol with measure in turn, its error prefixed with
// the protocol's name.
func onEachProtocol(ctx context.Context, env *env, floor bool, measure func(srv *served, p string) ([]Value, error)) ([]Value, error) {
	srv, err := startServer(ctx, env, floor)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	var out []Value
	for _, p := range serveProtocols {
		vs, err := measure(srv, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, vs...)
	}
	return out, nil
}

// perProtocol repeats the metrics of vs, each once per protocol, so that
// the library's figure stands in each protocol's row.
func perProtocol(vs []Value, metrics ...string) []Value {
	var out []Value
	for _, p := range serveProtocols {
		for _, v := range vs {
			if slices.Contains(metrics, v.Metric) {
				out = append(out, Value{Metric: v.Metric + " (" + p + ")", V: v.V})
			}
		}
	}
	return out
}

// serveHandoff: two callers, each with a client (and connections) of its
// own, contend on one name, releasing and asking again at once; the
// handoff is from one's Release returning to the other's held arriving.
// Raw column: two library contenders, each on a client and session of its
// own, its one run shown in each protocol's rows. The service's two
// callers share the server's session, and the library queues them in the
// server's process.
func serveHandoff(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	if impl.Name() != "baton" {
		sessions, closeSessions, err := ownSessions(env, 2)
		defer closeSessions()
		if err != nil {
			return nil, err
		}
		jobs := make([]turnJob, 2)
		for i, sess := range sessions {
			m, err := harness.Impls[0].NewMutex(sess.Client(), sess, name, 0)
			if err != nil {
				return nil, err
			}
			defer m.Close()
			var h harness.Held
			jobs[i] = turnJob{
				lock:   func(ctx context.Context) (err error) { h, err = m.Lock(ctx); return err },
				unlock: func(ctx context.Context) error { return h.Unlock(ctx) },
			}
		}
		vs, err := handoffValues(ctx, env, jobs, "")
		if err != nil {
			return nil, err
		}
		return perProtocol(vs, "acquisitions/s", "handoff p50 ms", "handoff p99 ms", "handoffs"), nil
	}
	return withFloor(ctx, env, name, remoteHandoffs, func(m string) bool { return strings.HasPrefix(m, "handoff p") })
}

// withFloor measures the service with measure, then floorHold with it,
// and adds the floor's metrics that keep says to the service's, named
// "floor ...".
func withFloor(ctx context.Context, env *env, name string, measure func(context.Context, *env, string, bool) ([]Value, error), keep func(metric string) bool) ([]Value, error) {
	out, err := measure(ctx, env, name, false)
	if err != nil {
		return nil, err
	}
	floor, err := measure(ctx, env, name, true)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	for _, v := range floor {
		if keep(v.Metric) {
			out = append(out, Value{Metric: "floor " + v.Metric, V: v.V})
		}
	}
	return out, nil
}

// remoteHandoffs measures serveHandoff's handoffs on the service, or with
// floor on floorHold.
func remoteHandoffs(ctx context.Context, env *env, name string, floor bool) ([]Value, error) {
	return onEachProtocol(ctx, env, floor, func(srv *served, p string) ([]Value, error) {
		var finishing sync.WaitGroup
		var finishErr error
		var mu sync.Mutex
		jobs := make([]turnJob, 2)
		var closers []func()
		for i := range jobs {
			c, closeIdle := serveClient(srv.url, p)
			closers = append(closers, closeIdle)
			var h *remoteHold
			jobs[i] = turnJob{
				lock: func(ctx context.Context) (err error) { h, err = holdRemote(ctx, c, name); return err },
				unlock: func(ctx context.Context) error {
					if err := h.release(ctx, c); err != nil {
						h.drop()
						return err
					}
					// The stream's end is read off the handoff's path.
					finishing.Add(1)
					go func(h *remoteHold) {
						defer finishing.Done()
						if err := h.finish(); err != nil {
							mu.Lock()
							finishErr = errors.Join(finishErr, err)
							mu.Unlock()
						}
					}(h)
					return nil
				},
			}
		}
		vs, err := handoffValues(ctx, env, jobs, " ("+p+")")
		finishing.Wait()
		for _, c := range closers {
			c()
		}
		return vs, errors.Join(err, finishErr)
	})
}

// handoffValues takes turns with jobs for cfg.Duration and measures the
// handoffs from one job to the other, each metric's name ending in sfx.
func handoffValues(ctx context.Context, env *env, jobs []turnJob, sfx string) ([]Value, error) {
	turns, end, err := takeTurns(ctx, env.cfg.Duration, jobs)
	if err != nil {
		return nil, err
	}
	var handoffs []time.Duration
	counted := 0
	for i, t := range turns {
		if i > 0 && t.who != turns[i-1].who {
			handoffs = append(handoffs, t.locked.Sub(turns[i-1].freed))
		}
		if t.locked.Before(end) {
			counted++
		}
	}
	h := harness.MsAll(handoffs)
	return []Value{
		{Metric: "acquisitions/s" + sfx, V: float64(counted) / env.cfg.Duration.Seconds()},
		{Metric: "handoff p50 ms" + sfx, V: harness.Percentile(h, 50)},
		{Metric: "handoff p99 ms" + sfx, V: harness.Percentile(h, 99)},
		{Metric: "handoffs" + sfx, V: float64(len(handoffs))},
	}, nil
}

// serveHolders is how many Hold calls run at once while serveHeld opens
// its holds.
const serveHolders = 32

// serveHeld: cfg.ServeHolds Hold streams over gRPC, each of a name of its
// own, all open at once; the server's live heap (after GC) grows by so
// much per hold, measured in the server's process (the child's alone with
// Config.ServeCommand; without it, this process's, clients included).
// Raw column: the library's heap per lock for as many locks on one
// session (harness.HoldMany, in a child process with Config.HeldCommand).
func serveHeld(ctx context.Context, env *env, impl harness.Impl, name string) ([]Value, error) {
	n := env.cfg.ServeHolds
	if impl.Name() != "baton" {
		var r harness.HeldResult
		var err error
		if len(env.cfg.HeldCommand) == 0 {
			r, err = harness.HoldMany(ctx, env.endpoint, harness.Impls[0], "wrap", n, serveTTL, time.Millisecond)
		} else {
			r, err = harness.HoldManyIn(ctx, env.cfg.HeldCommand, env.endpoint, "baton", "wrap", n, serveTTL, time.Millisecond)
		}
		if err != nil {
			return nil, err
		}
		return []Value{
			{Metric: "heap bytes/hold", V: r.HeapPerLock},
			{Metric: "goroutines/hold", V: r.GoroutinesPerLock},
			{Metric: "hold all s", V: r.LockSeconds},
		}, nil
	}
	return withFloor(ctx, env, name, heldStreams, func(m string) bool { return m != "hold all s" })
}

// heldStreams opens n Hold streams on the service (or, with floor, on
// floorHold's server) and measures the server's process.
func heldStreams(ctx context.Context, env *env, name string, floor bool) ([]Value, error) {
	n := env.cfg.ServeHolds
	srv, err := startServer(ctx, env, floor)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	c, closeIdle := serveClient(srv.url, "gRPC")
	defer closeIdle()
	// One hold and release first: the connection and the session of the
	// TTL, which every hold of it shares, are not the holds' cost.
	h, err := holdRemote(ctx, c, name+"-warm")
	switch {
	case err == nil && floor:
		h.drop()
	case err == nil:
		if err = h.release(ctx, c); err != nil {
			h.drop()
		} else {
			err = h.finish()
		}
	}
	if err != nil {
		return nil, err
	}
	before, err := srv.stats(ctx)
	if err != nil {
		return nil, err
	}
	holds := make([]*remoteHold, n)
	defer func() {
		for _, h := range holds {
			if h != nil {
				h.drop()
			}
		}
	}()
	start := time.Now()
	next := make(chan int)
	errs := make(chan error, serveHolders)
	var wg sync.WaitGroup
	for range serveHolders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				h, err := holdRemote(ctx, c, fmt.Sprintf("%s-%d", name, i))
				if err != nil {
					errs <- err
					return
				}
				holds[i] = h
			}
		}()
	}
	var failed error
feed:
	for i := range n {
		select {
		case next <- i:
		case failed = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if failed == nil {
		select {
		case failed = <-errs:
		default:
		}
	}
	if failed != nil {
		return nil, failed
	}
	holdAll := time.Since(start)
	after, err := srv.stats(ctx)
	if err != nil {
		return nil, err
	}
	per := func(a, b uint64) float64 { return float64(int64(a)-int64(b)) / float64(n) }
	return []Value{
		{Metric: "heap bytes/hold", V: per(after.HeapAlloc, before.HeapAlloc)},
		{Metric: "goroutines/hold", V: float64(after.Goroutines-before.Goroutines) / float64(n)},
		{Metric: "stack bytes/hold", V: per(after.StackInuse, before.StackInuse)},
		{Metric: "RSS bytes/hold", V: per(after.RSS, before.RSS)},
		{Metric: "hold all s", V: holdAll.Seconds()},
	}, nil
}

// ServeStats is what the server's process holds: its live heap after a
// full collection, its goroutines' stacks, its resident set and its
// goroutines; and the requests its etcd client sent, lease renewals
// aside.
type ServeStats struct {
	HeapAlloc    uint64 `json:"heap_alloc"`
	StackInuse   uint64 `json:"stack_inuse"`
	RSS          uint64 `json:"rss"`
	Goroutines   int    `json:"goroutines"`
	EtcdRequests int64  `json:"etcd_requests"`
}

// statsPath serves the server process's ServeStats beside the service.
const statsPath = "/bench/stats"

func readStats() ServeStats {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	s := ServeStats{HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse, Goroutines: runtime.NumGoroutine()}
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseUint(f[1], 10, 64)
			s.RSS = pages * uint64(os.Getpagesize())
		}
	}
	return s
}

// servedHere is a server in this process.
type servedHere struct {
	url  string
	stop func() error
}

// serveHere serves the service on 127.0.0.1 as `baton serve` does
// (HTTP/1.1 and h2c on one listener, its metrics registered; the limits
// raised past the workloads' holds), on an etcd client of its own, in
// namespace harness.Namespace.
func serveHere(endpoint string) (*servedHere, error) {
	counter := harness.NewCounter()
	cli, err := harness.NewClient(endpoint, counter)
	if err != nil {
		return nil, err
	}
	srv, err := serve.New(serve.Config{Client: cli, Namespace: harness.Namespace, MaxHolds: 1 << 20, MaxHoldsPerIdentity: 1 << 20,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	stopHTTP := serveOn(ln, srv.Handler(), func() int64 { return harness.RequestsExcept(counter.Snapshot(), harness.MethodKeepAlive) })
	stop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		stopHTTP(ctx)
		return errors.Join(err, cli.Close())
	}
	return &servedHere{url: "http://" + ln.Addr().String(), stop: stop}, nil
}

// serveOn serves h on ln as `baton serve` does (HTTP/1.1 and h2c on one
// listener), with the process's ServeStats at statsPath; the returned
// func stops it.
func serveOn(ln net.Listener, h http.Handler, requests func() int64) (stop func(context.Context)) {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc(statsPath, func(w http.ResponseWriter, _ *http.Request) {
		st := readStats()
		st.EtcdRequests = requests()
		_ = json.NewEncoder(w).Encode(st)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(ln) }()
	return func(ctx context.Context) {
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
		<-done
	}
}

// serveFloor serves floorHold on 127.0.0.1.
func serveFloor() (*servedHere, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(batonv1connect.NewBatonServiceHandler(newFloorHold(), connect.WithReadMaxBytes(serve.MaxRequestBytes)))
	stop := serveOn(ln, mux, func() int64 { return 0 })
	return &servedHere{url: "http://" + ln.Addr().String(), stop: func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		stop(ctx)
		return nil
	}}, nil
}

// ServeServer is the child process of the serve-* workloads (baton-bench
// serve-server -endpoint URL): it serves the service on the etcd at URL,
// prints its address as JSON ({"url": ...}) on stdout, and serves until
// ctx ends (SIGINT). args are the flags after "serve-server"; it returns
// the exit code.
func ServeServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "etcd client URL")
	floor := fs.Bool("floor", false, "serve the floor of a Hold stream (floorHold) instead of the service")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	serveFn := serveHere
	if *floor {
		serveFn = func(string) (*servedHere, error) { return serveFloor() }
	}
	s, err := serveFn(*endpoint)
	if err != nil {
		fmt.Fprintf(stderr, "serve-server: %v\n", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(map[string]string{"url": s.url}); err != nil {
		_ = s.stop()
		return 1
	}
	<-ctx.Done()
	if err := s.stop(); err != nil {
		fmt.Fprintf(stderr, "serve-server: %v\n", err)
		return 1
	}
	return 0
}

// served is the server of one workload run, in a child process or here.
type served struct {
	url  string
	stop func()
}

func (s *served) stats(ctx context.Context) (ServeStats, error) {
	var st ServeStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+statsPath, nil)
	if err != nil {
		return st, err
	}
	req.Close = true // no idle connection left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", statsPath, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// startServe starts the server of a workload run: in a child process
// (Config.ServeCommand with "serve-server" appended), or in this one.
func startServe(ctx context.Context, env *env) (*served, error) { return startServer(ctx, env, false) }

// startServer starts the service, or with floor the floor of its Hold
// streams (floorHold).
func startServer(ctx context.Context, env *env, floor bool) (*served, error) {
	if len(env.cfg.ServeCommand) == 0 {
		serveFn := serveHere
		if floor {
			serveFn = func(string) (*servedHere, error) { return serveFloor() }
		}
		s, err := serveFn(env.endpoint)
		if err != nil {
			return nil, err
		}
		return &served{url: s.url, stop: func() { _ = s.stop() }}, nil
	}
	c := env.cfg.ServeCommand
	args := append(slices.Clone(c[1:]), "serve-server", "-endpoint", env.endpoint)
	if floor {
		args = append(args, "-floor")
	}
	cmd := exec.Command(c[0], args...)
	stderr := &harness.Tail{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	line := make(chan []byte, 1)
	go func() {
		b, _ := bufio.NewReader(out).ReadBytes('\n')
		line <- b
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(exited)
	}()
	var b []byte
	select {
	case b = <-line:
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		stop()
		return nil, fmt.Errorf("serve-server: no address after 30 s: %s", stderr)
	}
	var addr struct{ URL string }
	if err := json.Unmarshal(b, &addr); err != nil || addr.URL == "" {
		stop()
		return nil, fmt.Errorf("serve-server: no address (%q): %s", b, stderr)
	}
	return &served{url: addr.URL, stop: stop}, nil
}
