package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// ProcessesConfig sizes the processes phase: Processes OS processes (the
// program Binary run as "<Binary> child ...") each take Locks locks, one
// after another on Workers goroutines, from Names names that every process
// shares, against one embedded etcd member (fsync on) that the parent
// runs. Every hold makes two fenced writes (enter, exit) to the parent,
// whose fencing.MemoryGuard admits them and whose ledger checks that no
// two holders of a name overlap.
type ProcessesConfig struct {
	// Binary is the executable run as "<Binary> child procs <args>"; its
	// child command must call Child.
	Binary string
	// Processes is the number of child processes.
	Processes int
	// Locks is the number of acquisitions each process makes.
	Locks int
	// Names is the number of lock names, shared by every process; zero
	// means Locks, so that each process takes every name once.
	Names int
	// Workers is the number of Lock calls at once in each process, per
	// session.
	Workers int
	// Sessions is the number of sessions (etcd leases) in each process,
	// all on its one client; zero means one. Each has Workers calls.
	Sessions int
	// Raw runs etcd's own concurrency.Mutex instead of baton's (its token
	// is the revision its Lock read at, after the wait: it grows from one
	// holder of a name to the next).
	Raw bool
	// TTL is each process's lease TTL, whole seconds, at least
	// session.MinTTL.
	TTL time.Duration
	// Deadline bounds the phase, from the first child's start.
	Deadline time.Duration
}

// DefaultProcessesConfig is the full size: 50 processes × 2,000 locks each
// over 2,000 shared names, 4 Lock calls at once per process, this
// program's executable as the child.
func DefaultProcessesConfig() ProcessesConfig {
	return ProcessesConfig{Binary: harness.Executable(), Processes: 50, Locks: 2000, Workers: 4, TTL: 10 * time.Second, Deadline: 3*time.Minute + 30*time.Second}
}

// procFDsPerChild is what one child costs the parent in file descriptors:
// its stdout and stderr pipes, its etcd connection at the server, one
// HTTP connection per worker (counted in procLimits), and slack.
const procFDsPerChild = 8

// procFDsBase is what the parent needs besides its children.
const procFDsBase = 256

// procMemPerChild is what one child is allowed in the memory check: a Go
// process with an etcd client, a session and a few thousand Mutexes.
const procMemPerChild = 64 << 20

// Validate rejects sizes the phase cannot run with, naming the field and
// its bound; the bounds of Processes include this machine's
// file-descriptor limit and available memory.
func (c ProcessesConfig) Validate() error {
	var errs []error
	if err := harness.CheckBinary("processes", c.Binary); err != nil {
		errs = append(errs, err)
	}
	if c.Processes <= 0 {
		errs = append(errs, fmt.Errorf("processes: Processes must be at least 1, got %d", c.Processes))
	}
	if c.Locks <= 0 {
		errs = append(errs, fmt.Errorf("processes: Locks must be at least 1, got %d", c.Locks))
	}
	if c.Names < 0 {
		errs = append(errs, fmt.Errorf("processes: Names must be at least 1 (0: Locks), got %d", c.Names))
	}
	if c.Workers <= 0 {
		errs = append(errs, fmt.Errorf("processes: Workers must be at least 1, got %d", c.Workers))
	}
	if c.Sessions < 0 {
		errs = append(errs, fmt.Errorf("processes: Sessions must be at least 1 (0: 1), got %d", c.Sessions))
	}
	errs = append(errs, checkTTL("processes", c.TTL))
	errs = append(errs, checkDeadline("processes", c.Deadline))
	if c.Processes > 0 && c.Workers > 0 && c.Sessions >= 0 {
		fds, mem := harness.Limits()
		per := uint64(procFDsPerChild + c.Workers*max(c.Sessions, 1))
		if fds > 0 && uint64(c.Processes)*per+procFDsBase > fds {
			errs = append(errs, fmt.Errorf("processes: Processes must be at most %d with %d Workers under the file-descriptor limit %d (each child costs the parent %d), got %d",
				(fds-min(fds, procFDsBase))/per, c.Workers, fds, per, c.Processes))
		}
		if mem > 0 && uint64(c.Processes)*procMemPerChild > mem {
			errs = append(errs, fmt.Errorf("processes: Processes must be at most %d with %d MiB available (%d MiB allowed per child), got %d",
				mem/procMemPerChild, mem>>20, procMemPerChild>>20, c.Processes))
		}
	}
	return errors.Join(errs...)
}

// ProcessesResult is what the processes phase measured.
type ProcessesResult struct {
	OK       bool     `json:"ok"`
	Failures []string `json:"failures,omitempty"`

	Processes int    `json:"processes"`
	Locks     int    `json:"locks"`
	Names     int    `json:"names"`
	Workers   int    `json:"workers"`
	Sessions  int    `json:"sessions_per_process"`
	Impl      string `json:"impl"`
	// Acquisitions counts holds the parent saw enter and exit.
	Acquisitions int `json:"acquisitions"`
	// Handoffs counts holds whose name's previous holder was another
	// process; Contended those whose Lock started before the previous
	// holder's exit write reached the parent (it queued behind it).
	Handoffs  int `json:"handoffs"`
	Contended int `json:"contended"`
	// Writes counts fenced writes the guard admitted; Rejected those it
	// refused (a stale token: a holder that had lost its lock).
	Writes   int `json:"writes"`
	Rejected int `json:"rejected"`
	// Overlaps counts enter writes while another holder of the name had
	// not written its exit: two holders at once.
	Overlaps int `json:"overlaps"`
	// ChildErrors counts errors the children reported.
	ChildErrors int `json:"child_errors"`
	// Acquire latency of every Lock call, from call to return.
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
	// StartSeconds is from the first child's start to every child
	// connected; RunSeconds from then to the last child's exit;
	// PerSecond acquisitions per second of RunSeconds.
	StartSeconds float64 `json:"start_seconds"`
	RunSeconds   float64 `json:"run_seconds"`
	PerSecond    float64 `json:"per_second"`
	// EventsPerAcquisition, WatchMessagesPerAcquisition and
	// UnaryPerAcquisition are what the member counted from every child
	// connected to the last one's exit (etcd_debugging_mvcc_events_total,
	// Watch messages sent, unary requests answered), per acquisition.
	EventsPerAcquisition        float64 `json:"events_per_acquisition"`
	WatchMessagesPerAcquisition float64 `json:"watch_messages_per_acquisition"`
	UnaryPerAcquisition         float64 `json:"unary_per_acquisition"`
	// ChildMaxRSS is the largest child's peak resident memory; ParentFDs
	// the parent's open file descriptors with every child connected.
	ChildMaxRSS int64 `json:"child_max_rss_bytes"`
	ParentFDs   int   `json:"parent_fds"`
	// KeysLeft counts keys under the phase's namespace after every child
	// exited, but the namespace's release marks (/<ns>/v1/released, released-b).
	KeysLeft int `json:"keys_left"`
}

// procNamespace holds the phase's keys.
const procNamespace = "scale-procs"

// procName is the lock name of index i.
func procName(i int) string { return fmt.Sprintf("proc-%d", i) }

// procHold is the ledger's state of one name.
type procHold struct {
	open      bool
	proc      int
	token     fencing.Token
	lastProc  int
	lastToken fencing.Token
	lastExit  int64 // wall clock, ns, when the last exit write arrived
}

// procLedger checks the fenced writes: per name, an enter must come after
// the previous holder's exit and carry a greater token.
type procLedger struct {
	ledger
	names     map[string]*procHold
	lat       []time.Duration
	handoffs  int
	contended int
}

// ledger is what the phases' ledgers share: the fenced writes applied,
// enters while another holder had not exited, the first violations.
type ledger struct {
	mu         sync.Mutex
	writes     int
	overlaps   int
	violations []string
}

func (l *ledger) violate(format string, args ...any) {
	if len(l.violations) < 20 {
		l.violations = append(l.violations, fmt.Sprintf(format, args...))
	}
}

// admitted is the token and resource of a write the guard let through;
// false, answered, if it did not.
func admitted(w http.ResponseWriter, r *http.Request) (fencing.Token, string, bool) {
	tok, name, ok := fencing.TokenFromContext(r.Context())
	if !ok {
		http.Error(w, "not admitted", http.StatusInternalServerError)
	}
	return tok, name, ok
}

// applyPhase applies an admitted write by its query's phase, enter or
// exit, and answers 204; any other phase is answered 400.
func applyPhase(w http.ResponseWriter, q url.Values, enter, exit func()) {
	switch q.Get("phase") {
	case "enter":
		enter()
	case "exit":
		exit()
	default:
		http.Error(w, "bad phase", http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readReport decodes into rep the JSON lines a child printed on stdout:
// its report, one line at its end.
func readReport(stdout *bytes.Buffer, rep any) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		_ = json.Unmarshal(sc.Bytes(), rep)
	}
}

// ServeHTTP applies one admitted write: /write/<name>?proc=&phase=enter|exit
// (&lat=&start= on enter).
func (l *procLedger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, name, ok := admitted(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	proc, err := strconv.Atoi(q.Get("proc"))
	if err != nil {
		http.Error(w, "bad proc", http.StatusBadRequest)
		return
	}
	now := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	h := l.names[name]
	if h == nil {
		h = &procHold{lastProc: -1}
		l.names[name] = h
	}
	applyPhase(w, q, func() {
		lat, _ := strconv.ParseInt(q.Get("lat"), 10, 64)
		start, _ := strconv.ParseInt(q.Get("start"), 10, 64)
		l.lat = append(l.lat, time.Duration(lat))
		if h.open {
			l.overlaps++
			l.violate("%s: process %d entered with token %d while process %d (token %d) held it", name, proc, tok, h.proc, h.token)
		}
		if tok <= h.lastToken {
			l.violate("%s: process %d entered with token %d, not above the previous holder's %d", name, proc, tok, h.lastToken)
		}
		if h.lastProc >= 0 && h.lastProc != proc {
			l.handoffs++
			if start < h.lastExit {
				l.contended++
			}
		}
		h.open, h.proc, h.token = true, proc, tok
	}, func() {
		if !h.open || h.proc != proc || h.token != tok {
			l.violate("%s: process %d exited with token %d, not the holder (open %v, process %d, token %d)", name, proc, tok, h.open, h.proc, h.token)
		}
		h.open, h.lastProc, h.lastToken, h.lastExit = false, proc, tok, now
	})
}

// procChildReport is the JSON line a child prints on stdout at its end.
type procChildReport struct {
	Proc     int      `json:"proc"`
	Acquired int      `json:"acquired"`
	Errors   []string `json:"errors,omitempty"`
}

// phaseMember starts a phase's embedded member (fsync on) and a client of
// it; stop closes both.
func phaseMember() (*embedetcd.Server, *clientv3.Client, func(), error) {
	srv, err := embedetcd.New(embedetcd.Config{})
	if err != nil {
		return nil, nil, nil, err
	}
	cli, err := srv.NewClient()
	if err != nil {
		srv.Stop()
		return nil, nil, nil, err
	}
	return srv, cli, func() { _ = cli.Close(); srv.Stop() }, nil
}

// Processes runs the processes phase. A failed check is in
// ProcessesResult.Failures (OK false); an error means the phase could not
// run.
func Processes(ctx context.Context, cfg ProcessesConfig, progress io.Writer) (ProcessesResult, error) {
	if err := cfg.Validate(); err != nil {
		return ProcessesResult{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	if cfg.Names == 0 {
		cfg.Names = cfg.Locks
	}
	cfg.Sessions = max(cfg.Sessions, 1)
	impl := "baton"
	if cfg.Raw {
		impl = "raw"
	}
	res := ProcessesResult{Processes: cfg.Processes, Locks: cfg.Locks, Names: cfg.Names, Workers: cfg.Workers, Sessions: cfg.Sessions, Impl: impl}
	ctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()

	srv, cli, stop, err := phaseMember()
	if err != nil {
		return res, err
	}
	defer stop()

	// The protected resource: the parent's guard and ledger, over HTTP.
	ledger := &procLedger{names: make(map[string]*procHold, cfg.Names), lat: make([]time.Duration, 0, cfg.Processes*cfg.Locks)}
	var rejected atomic.Int64
	var ready atomic.Int64
	allReady := make(chan struct{})
	fence, err := startFence(ledger, func(*http.Request) { rejected.Add(1) }, func(mux *http.ServeMux) {
		// /ready answers once every child is connected: the start barrier.
		mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
			if ready.Add(1) == int64(cfg.Processes) {
				close(allReady)
			}
			select {
			case <-allReady:
				w.WriteHeader(http.StatusNoContent)
			case <-r.Context().Done():
			}
		})
	})
	if err != nil {
		return res, err
	}
	defer fence.close()
	guardURL := fence.url

	type child struct {
		*harness.Child
		stdout bytes.Buffer
	}
	children := make([]*child, cfg.Processes)
	start := time.Now()
	var failures []string
	for i := range children {
		c := &child{Child: harness.NewChild(ctx, cfg.Binary, "procs", 10*time.Second,
			"-endpoint", srv.Endpoint(), "-guard", guardURL, "-proc", strconv.Itoa(i),
			"-locks", strconv.Itoa(cfg.Locks), "-names", strconv.Itoa(cfg.Names),
			"-workers", strconv.Itoa(cfg.Workers), "-ttl", cfg.TTL.String(),
			"-sessions", strconv.Itoa(cfg.Sessions), "-impl", impl)}
		c.Stdout = &c.stdout
		if err := c.Start(); err != nil {
			for _, p := range children[:i] {
				_ = p.Process.Kill()
				_ = p.Wait()
			}
			return res, fmt.Errorf("processes: starting child %d: %w", i, err)
		}
		children[i] = c
	}
	// Every child reaches the barrier or exits.
	exited := make(chan int, cfg.Processes)
	var waits sync.WaitGroup
	for i, c := range children {
		waits.Go(func() {
			_ = c.Wait()
			exited <- i
		})
	}
	var runStart time.Time
	var srvStart ServerStats
	var srvErr error
	select {
	case <-allReady:
		runStart = time.Now()
		srvStart, srvErr = ReadServer(nil)
		res.StartSeconds = runStart.Sub(start).Seconds()
		res.ParentFDs = harness.OpenFDs()
		fmt.Fprintf(progress, "processes: %d children (%s, %d sessions each) connected in %.1f s (parent has %d fds open); locking\n", cfg.Processes, impl, cfg.Sessions, res.StartSeconds, res.ParentFDs)
	case <-ctx.Done():
	case i := <-exited:
		failures = append(failures, fmt.Sprintf("child %d exited before every child connected", i))
		cancel() // the others are told to stop (SIGTERM)
	}
	waits.Wait()
	end := time.Now()
	if srvEnd, err := ReadServer(nil); err == nil && srvErr == nil && !runStart.IsZero() {
		d := srvEnd.Sub(srvStart)
		n := float64(cfg.Processes * cfg.Locks)
		res.EventsPerAcquisition, res.WatchMessagesPerAcquisition, res.UnaryPerAcquisition = d.Events/n, d.WatchMessages/n, d.Unary/n
	}
	if !runStart.IsZero() {
		res.RunSeconds = end.Sub(runStart).Seconds()
	} else {
		failures = append(failures, fmt.Sprintf("only %d of %d children connected", ready.Load(), cfg.Processes))
	}
	if ctx.Err() != nil {
		failures = append(failures, fmt.Sprintf("the phase did not end within its Deadline %v", cfg.Deadline))
	}

	for i, c := range children {
		st := c.ProcessState
		res.ChildMaxRSS = max(res.ChildMaxRSS, c.MaxRSS())
		var rep procChildReport
		readReport(&c.stdout, &rep)
		res.ChildErrors += len(rep.Errors)
		switch {
		case !st.Success():
			failures = append(failures, fmt.Sprintf("child %d: %v: %s", i, st, c.Stderr()))
		case rep.Acquired != cfg.Locks || len(rep.Errors) > 0:
			failures = append(failures, fmt.Sprintf("child %d: acquired %d of %d, errors %q", i, rep.Acquired, cfg.Locks, rep.Errors))
		}
	}

	ledger.mu.Lock()
	res.Writes, res.Overlaps, res.Handoffs, res.Contended = ledger.writes, ledger.overlaps, ledger.handoffs, ledger.contended
	res.Acquisitions = len(ledger.lat)
	res.P50, res.P99 = harness.Percentile(ledger.lat, 50), harness.Percentile(ledger.lat, 99)
	for _, d := range ledger.lat {
		res.Max = max(res.Max, d)
	}
	for _, h := range ledger.names {
		if h.open {
			failures = append(failures, fmt.Sprintf("process %d never wrote its exit (token %d)", h.proc, h.token))
			break
		}
	}
	failures = append(failures, ledger.violations...)
	ledger.mu.Unlock()
	res.Rejected = int(rejected.Load())
	if res.Rejected > 0 {
		failures = append(failures, fmt.Sprintf("the guard rejected %d writes as stale", res.Rejected))
	}
	if want := cfg.Processes * cfg.Locks; res.Acquisitions != want {
		failures = append(failures, fmt.Sprintf("%d of %d acquisitions reached the guard", res.Acquisitions, want))
	}
	if res.RunSeconds > 0 {
		res.PerSecond = float64(res.Acquisitions) / res.RunSeconds
	}

	if res.KeysLeft, err = countKeysLeft(cli, procNamespace, &failures); err != nil {
		return res, fmt.Errorf("processes: %w", err)
	}
	res.Failures = stormFirst(failures, 20)
	res.OK = len(res.Failures) == 0
	fmt.Fprintf(progress, "processes: %s, %d × %d sessions, %d × %d acquisitions in %.1f s (%.0f/s), %d handoffs between processes (%d contended), %d fenced writes, %d overlaps, %d rejected; acquire p50 %v p99 %v max %v; child max RSS %d MiB; the member sent %.1f watch events (%.1f messages) and answered %.1f unary requests per acquisition\n",
		impl, cfg.Processes, cfg.Sessions, cfg.Processes, cfg.Locks, res.RunSeconds, res.PerSecond, res.Handoffs, res.Contended, res.Writes, res.Overlaps, res.Rejected,
		res.P50.Round(time.Microsecond), res.P99.Round(time.Microsecond), res.Max.Round(time.Microsecond), res.ChildMaxRSS>>20,
		res.EventsPerAcquisition, res.WatchMessagesPerAcquisition, res.UnaryPerAcquisition)
	return res, nil
}

// Child is the body of the harness's child processes, "<Binary> child
// ROLE ...", and returns the process's exit code. Roles:
//
//   - storm: the storm's holder process (see Storm); it reads the parent's
//     word of the restore on stdin.
//   - procs -endpoint URL -guard URL -proc N -locks N -names N -workers N
//     -ttl D -sessions N -impl baton|raw: a process of the processes and
//     fleet phases. It connects, opens its sessions, waits at the parent's
//     start barrier, makes its acquisitions (workers per session), each
//     with an enter and an exit write through the parent's guard, closes
//     everything and prints a JSON report line on stdout.
//   - shards -endpoint URL -guard URL -group G -count N -member NAME -ttl D:
//     a member process of the shards phase, until SIGTERM; each shard's fn
//     writes enter and exit through the parent's guard; a JSON report line
//     on stdout at its end.
func Child(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "child: a role is needed: storm, procs or shards")
		return 2
	}
	switch args[0] {
	case "storm":
		return stormHolder(ctx, args[1:], stdout, stderr, os.Stdin)
	case "procs":
		return procChildMain(ctx, args[1:], stdout, stderr)
	case "shards":
		return shardsChildMain(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "child: no role %q (have storm, procs, shards)\n", args[0])
		return 2
	}
}

func procChildMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("child procs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "etcd client URL")
	guardURL := fs.String("guard", "", "the parent's guard URL")
	proc := fs.Int("proc", 0, "this process's number")
	locks := fs.Int("locks", 0, "acquisitions to make")
	names := fs.Int("names", 0, "lock names shared by every process")
	workers := fs.Int("workers", 1, "Lock calls at once")
	ttl := fs.Duration("ttl", 10*time.Second, "the session's lease TTL")
	sessions := fs.Int("sessions", 1, "sessions in this process, each with -workers Lock calls at once")
	implName := fs.String("impl", "baton", "baton, or raw: etcd's concurrency.Mutex")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *endpoint == "" || *guardURL == "" || *locks < 1 || *names < 1 || *workers < 1 || *sessions < 1 || *implName != "baton" && *implName != "raw" {
		fmt.Fprintln(stderr, "child: -endpoint, -guard, -locks, -names, -workers and -sessions are required and positive; -impl is baton or raw")
		return 2
	}
	rep, err := procChild(ctx, *endpoint, *guardURL, *proc, *locks, *names, *workers, *sessions, *implName == "raw", *ttl)
	if err != nil {
		fmt.Fprintf(stderr, "child %d: %v\n", *proc, err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

func procChild(ctx context.Context, endpoint, guardURL string, proc, locks, names, workers, sessions int, raw bool, ttl time.Duration) (procChildReport, error) {
	rep := procChildReport{Proc: proc}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return rep, err
	}
	defer cli.Close()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers * sessions, MaxConnsPerHost: workers * sessions}}
	defer hc.CloseIdleConnections()

	// Connected once etcd answers; then the sessions, then the barrier.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = cli.Get(cctx, "/"+procNamespace+"/ready")
	cancel()
	if err != nil {
		return rep, fmt.Errorf("connecting: %w", err)
	}
	lockers := make([]procLocker, sessions)
	for i := range lockers {
		if raw {
			cs, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
			if err != nil {
				return rep, err
			}
			defer cs.Close()
			lockers[i] = rawLocker{cs}
			continue
		}
		sess, err := session.New(cli, session.WithTTL(ttl))
		if err != nil {
			return rep, err
		}
		defer sess.Close()
		bl := &batonLocker{cli: cli, sess: sess, who: fmt.Sprintf("proc-%d.%d", proc, i), mutexes: make(map[int]*mutex.Mutex)}
		defer bl.close()
		lockers[i] = bl
	}
	if err := procPost(ctx, hc, guardURL+"/ready", 0, 2*time.Minute); err != nil {
		return rep, fmt.Errorf("start barrier: %w", err)
	}

	// This process's order of the shared names.
	rng := rand.New(rand.NewPCG(uint64(proc), 0x5ca1e))
	order := rng.Perm(names)
	var (
		mu   sync.Mutex
		next atomic.Int64
		errs []string
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	}
	var acquired atomic.Int64
	var wg sync.WaitGroup
	for i := range workers * sessions {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= locks || ctx.Err() != nil {
					return
				}
				n := order[k%names]
				if err := procHoldOnce(ctx, hc, guardURL, lockers[i%sessions], proc, n); err != nil {
					fail(fmt.Errorf("%s: %w", procName(n), err))
					return
				}
				acquired.Add(1)
			}
		})
	}
	wg.Wait()
	rep.Acquired, rep.Errors = int(acquired.Load()), errs
	if ctx.Err() != nil && len(errs) == 0 {
		rep.Errors = append(rep.Errors, ctx.Err().Error())
	}
	return rep, nil
}

// procLocker takes name n through one session of a child: baton's
// mutex.Mutex, or etcd's concurrency.Mutex.
type procLocker interface {
	// lock returns the token and a context that ends when ownership may
	// be gone, for the writes.
	lock(ctx context.Context, n int) (tok fencing.Token, held context.Context, unlock func(context.Context) error, err error)
}

// batonLocker is one baton session and a Mutex per name, made on first use.
type batonLocker struct {
	cli     *clientv3.Client
	sess    *session.Session
	who     string
	mu      sync.Mutex
	mutexes map[int]*mutex.Mutex
}

func (b *batonLocker) lock(ctx context.Context, n int) (fencing.Token, context.Context, func(context.Context) error, error) {
	b.mu.Lock()
	m := b.mutexes[n]
	if m == nil {
		var err error
		m, err = mutex.New(b.cli, procName(n), mutex.WithNamespace(procNamespace), mutex.WithSession(b.sess), mutex.WithIdentity(b.who))
		if err != nil {
			b.mu.Unlock()
			return 0, nil, nil, err
		}
		b.mutexes[n] = m
	}
	b.mu.Unlock()
	l, err := m.Lock(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	return l.Token(), l.Context(), l.Unlock, nil
}

func (b *batonLocker) close() {
	for _, m := range b.mutexes {
		_ = m.Close()
	}
}

// rawLocker is one etcd session; a concurrency.Mutex per call (one is
// stateful), on baton's layout of the name's queue.
type rawLocker struct{ cs *concurrency.Session }

func (r rawLocker) lock(ctx context.Context, n int) (fencing.Token, context.Context, func(context.Context) error, error) {
	m := concurrency.NewMutex(r.cs, keys.Prefix(procNamespace, keys.Lock, procName(n)))
	if err := m.Lock(ctx); err != nil {
		return 0, nil, nil, err
	}
	return fencing.Token(m.Header().Revision), r.cs.Ctx(), m.Unlock, nil
}

// procHoldOnce takes name n, writes enter and exit through the guard, and
// releases it.
func procHoldOnce(ctx context.Context, hc *http.Client, guardURL string, lk procLocker, proc, n int) error {
	startWall := time.Now()
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	tok, held, unlock, err := lk.lock(lctx, n)
	cancel()
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	lat := time.Since(startWall)
	base := fmt.Sprintf("%s/write/%s?proc=%d", guardURL, procName(n), proc)
	err = procPost(held, hc, fmt.Sprintf("%s&phase=enter&lat=%d&start=%d", base, lat.Nanoseconds(), startWall.UnixNano()), tok, 30*time.Second)
	if err == nil {
		err = procPost(held, hc, base+"&phase=exit", tok, 30*time.Second)
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
	uerr := unlock(uctx)
	ucancel()
	if err != nil {
		return fmt.Errorf("fenced write: %w (lock: %v)", err, context.Cause(held))
	}
	if uerr != nil {
		return fmt.Errorf("unlock: %w", uerr)
	}
	return nil
}

// procPost POSTs to url with token t (none when 0) and wants 2xx.
func procPost(ctx context.Context, hc *http.Client, url string, t fencing.Token, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	if t != 0 {
		fencing.SetHeader(req, t)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
