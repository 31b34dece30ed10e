package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// HeldResult is what one process holding many locks on one session costs
// it, and what it sends etcd while it holds them.
type HeldResult struct {
	Impl string `json:"impl"`
	// Via is how baton's session was made: "wrap" (session.Wrap of the
	// etcd session), "new" (session.New) or "etcd" (the etcd session given
	// to mutex.WithSession).
	Via   string `json:"via,omitempty"`
	Locks int    `json:"locks"`
	// TTLSeconds is the session's lease TTL.
	TTLSeconds int `json:"ttl_seconds"`
	// HeapPerLock is the growth of live heap (after GC) per held lock.
	HeapPerLock float64 `json:"heap_bytes_per_lock"`
	// GoroutinesPerLock is the growth of the goroutine count per held lock.
	GoroutinesPerLock float64 `json:"goroutines_per_lock"`
	// RenewalsPerSecond counts lease renewals sent while the locks are held.
	RenewalsPerSecond float64 `json:"renewals_per_second"`
	// OtherPerSecond counts every other request sent meanwhile.
	OtherPerSecond float64 `json:"other_requests_per_second"`
	// LockSeconds is how long taking every lock took.
	LockSeconds float64 `json:"lock_seconds"`
	// Requests counts the requests sent during the window, by method.
	Requests map[string]int64 `json:"requests"`
}

// heldWorkers is how many Lock calls run at once while taking the locks.
const heldWorkers = 32

// HoldMany takes n locks, each on its own name, all on one session of the
// given TTL, then measures the live heap and goroutines they cost and
// counts the requests sent during window. Run it in a process of its own
// (see the baton-bench program) so that the heap it measures is the
// client's alone, not the embedded server's too.
func HoldMany(ctx context.Context, endpoint string, impl Impl, via string, n int, ttl, window time.Duration) (HeldResult, error) {
	counter := NewCounter()
	cli, err := NewClient(endpoint, counter)
	if err != nil {
		return HeldResult{}, err
	}
	defer cli.Close()
	_, isBaton := impl.(Baton)
	var sess *concurrency.Session // none for session.New: its renewals alone are counted
	if !isBaton || via != "new" {
		if sess, err = concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second))); err != nil {
			return HeldResult{}, err
		}
		defer sess.Close() // revokes the lease: every key goes at once
	}
	run := fmt.Sprintf("%s-%s-%x", impl.Name(), via, time.Now().UnixNano())
	newMutex := func(name string) (Mutex, error) { return impl.NewMutex(cli, sess, name, 0) }
	if isBaton && via != "wrap" {
		opt := mutex.WithSession(sess)
		if via == "new" {
			bs, err := bsession.New(cli, bsession.WithTTL(ttl))
			if err != nil {
				return HeldResult{}, err
			}
			defer bs.Close()
			opt = mutex.WithSession(bs)
		}
		newMutex = func(name string) (Mutex, error) {
			m, err := mutex.New(cli, name, mutex.WithNamespace(Namespace), opt)
			return batonMutex{m}, err
		}
	}

	mus := make([]Mutex, n)
	helds := make([]Held, n)
	before, gBefore := liveHeap()

	start := time.Now()
	next := make(chan int)
	errs := make(chan error, heldWorkers)
	var wg sync.WaitGroup
	for range heldWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m, err := newMutex(fmt.Sprintf("held-%s-%d", run, i))
				if err != nil {
					errs <- err
					return
				}
				h, err := m.Lock(ctx)
				if err != nil {
					errs <- sessionEnded(err, sess, ttl)
					return
				}
				mus[i], helds[i] = m, h
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
		return HeldResult{}, failed
	}
	lockTime := time.Since(start)

	after, gAfter := liveHeap()
	counter.Reset()
	if err := retry.Sleep(ctx, window); err != nil {
		return HeldResult{}, err
	}
	counts := counter.Snapshot()
	if heapProfile != "" {
		if err := writeHeapProfile(heapProfile); err != nil {
			return HeldResult{}, err
		}
	}
	runtime.KeepAlive(mus)
	runtime.KeepAlive(helds)
	return HeldResult{
		Impl: impl.Name(), Via: via, Locks: n, TTLSeconds: int(ttl / time.Second),
		HeapPerLock:       float64(int64(after)-int64(before)) / float64(n),
		GoroutinesPerLock: float64(gAfter-gBefore) / float64(n),
		RenewalsPerSecond: float64(counts[MethodKeepAlive]) / window.Seconds(),
		OtherPerSecond:    float64(RequestsExcept(counts, MethodKeepAlive)) / window.Seconds(),
		LockSeconds:       lockTime.Seconds(),
		Requests:          counts,
	}, nil
}

// heapProfile is where HeldClient's -memprofile writes, "" for nowhere.
var heapProfile string

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// sessionEnded says so in err when the etcd session itself ended: its
// client closes it when no renewal reply came within the TTL, which a
// starved process (CI under heavy load) can see with a short TTL.
func sessionEnded(err error, sess *concurrency.Session, ttl time.Duration) error {
	if sess == nil {
		return err
	}
	select {
	case <-sess.Done():
		return fmt.Errorf("%w (the etcd session of TTL %v itself ended)", err, ttl)
	default:
		return err
	}
}

// liveHeap returns the heap in use after a full collection, and the
// number of goroutines.
func liveHeap() (uint64, int) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}

// HoldManyIn runs HoldMany in a child process, so that the heap it
// measures is the client's alone: command is run with "held-client" and
// flags appended, and must run HeldClient (baton-bench and baton-scale do).
func HoldManyIn(ctx context.Context, command []string, endpoint, impl, via string, n int, ttl, window time.Duration) (HeldResult, error) {
	args := append(slices.Clone(command[1:]), "held-client",
		"-endpoint", endpoint, "-impl", impl, "-via", via, "-locks", fmt.Sprint(n),
		"-ttl", ttl.String(), "-window", window.String())
	cmd := exec.CommandContext(ctx, command[0], args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return HeldResult{}, fmt.Errorf("held-locks client: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var r HeldResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return HeldResult{}, fmt.Errorf("held-locks client output: %w", err)
	}
	return r, nil
}

// HeldClient is the child process of HoldManyIn: it holds the locks
// against the given endpoint and prints a HeldResult as JSON; args are the
// flags after "held-client". It returns the exit code.
func HeldClient(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("held-client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "etcd client URL")
	implName := fs.String("impl", "baton", "baton or raw")
	via := fs.String("via", "wrap", "how baton's session is made: wrap, new or etcd")
	locks := fs.Int("locks", 10000, "locks to hold")
	ttl := fs.Duration("ttl", 3*time.Second, "the session's lease TTL")
	window := fs.Duration("window", 6*time.Second, "how long renewals are counted")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this client to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile of this client, every allocation recorded, to this file while the locks are held")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 1
		heapProfile = *memProfile
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "held-client: -cpuprofile: %v\n", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	impl, err := ImplByName(*implName)
	if err != nil {
		fmt.Fprintf(stderr, "held-client: %v\n", err)
		return 2
	}
	r, err := HoldMany(ctx, *endpoint, impl, *via, *locks, *ttl, *window)
	if err != nil {
		fmt.Fprintf(stderr, "held-client: %v\n", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

// ImplByName returns the implementation called name.
func ImplByName(name string) (Impl, error) {
	for _, i := range Impls {
		if i.Name() == name {
			return i, nil
		}
	}
	return nil, fmt.Errorf("no implementation %q (want baton or raw)", name)
}
