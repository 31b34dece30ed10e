package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// One embedded etcd member (fsync on) for the package.
var srv *etcdtest.Server

// endpoint is srv's, or BATON_BENCH_ENDPOINT's: with an etcd in another
// process (`baton dev --listen 127.0.0.1:23790 --listen-peer
// 127.0.0.1:23800`), the benchmarks' -benchmem and -cpuprofile count the
// client alone, not the server's work too. The tests that need the
// embedded member skip then.
var endpoint = os.Getenv("BATON_BENCH_ENDPOINT")

// needServer skips a test that runs workloads on the embedded member.
func needServer(t *testing.T) {
	if srv == nil {
		t.Skip("BATON_BENCH_ENDPOINT set: no embedded member")
	}
}

func TestMain(m *testing.M) {
	if endpoint != "" {
		os.Exit(m.Run())
	}
	s, err := etcdtest.New(etcdtest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, endpoint = s, s.Endpoint()
	code := m.Run()
	s.Stop()
	if code == 0 {
		if err := goleak.Find(goleakOptions...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var goleakOptions = []goleak.Option{
	// etcd's embedded server leaves these behind until process exit.
	goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*serverWatchStream).recvLoop"),
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
}

func client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := harness.NewClient(endpoint, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}

func session(tb testing.TB, cli *clientv3.Client) *concurrency.Session {
	tb.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func uniq(b *testing.B) string {
	return strings.NewReplacer("/", "-", "=", "-").Replace(b.Name()) + fmt.Sprint(time.Now().UnixNano())
}

// BenchmarkLockUnlock is one uncontended Lock and Unlock, on a session
// shared by every iteration, or with a lease granted and revoked for each.
// Compare the implementations with benchstat -col /impl.
func BenchmarkLockUnlock(b *testing.B) {
	ctx := context.Background()
	for _, impl := range harness.Impls {
		b.Run("impl="+impl.Name()+"/session=shared", func(b *testing.B) {
			cli := client(b)
			m, err := impl.NewMutex(cli, session(b, cli), uniq(b), 0)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			cpu := cpuTime()
			for b.Loop() {
				h, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
		b.Run("impl="+impl.Name()+"/session=per-lock", func(b *testing.B) {
			cli := client(b)
			name := uniq(b)
			cpu := cpuTime()
			for b.Loop() {
				m, err := impl.NewMutex(cli, nil, name, 30*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				h, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Close(); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per op since since: with the
// etcd member in another process (BATON_BENCH_ENDPOINT), the client's
// own, which the machine's load moves far less than the time per op.
func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64((cpuTime()-since).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkContended is one acquisition of a key that 8 goroutines, each
// with its own client and session, lock and unlock in turn: the time per
// op is the time per handoff.
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	const contenders = 8
	for _, impl := range harness.Impls {
		b.Run("impl="+impl.Name(), func(b *testing.B) {
			name := uniq(b)
			mus := make([]harness.Mutex, contenders)
			for i := range mus {
				cli := client(b)
				m, err := impl.NewMutex(cli, session(b, cli), name, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				mus[i] = m
			}
			var (
				mu    sync.Mutex
				left  = b.N
				wg    sync.WaitGroup
				first error
			)
			take := func() bool {
				mu.Lock()
				defer mu.Unlock()
				left--
				return left >= 0 && first == nil
			}
			b.ResetTimer()
			for _, m := range mus {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for take() {
						h, err := m.Lock(ctx)
						if err == nil {
							err = h.Unlock(ctx)
						}
						if err != nil {
							mu.Lock()
							first = err
							mu.Unlock()
							return
						}
					}
				}()
			}
			wg.Wait()
			if first != nil {
				b.Fatal(first)
			}
		})
	}
}

// BenchmarkFailover is one graceful failover: the leader resigns and the
// queued candidate's Campaign returns.
func BenchmarkFailover(b *testing.B) {
	ctx := context.Background()
	for _, impl := range harness.Impls {
		b.Run("impl="+impl.Name(), func(b *testing.B) {
			name := uniq(b)
			els := make([]harness.Election, 2)
			for i := range els {
				cli := client(b)
				e, err := impl.NewElection(cli, session(b, cli), name, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				els[i] = e
			}
			watcher := client(b)
			term, err := els[0].Campaign(ctx, "0")
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				next := els[i%2]
				ch := make(chan harness.Term, 1)
				go func() {
					t, err := next.Campaign(ctx, fmt.Sprint(i%2))
					if err != nil {
						b.Error(err)
					}
					ch <- t
				}()
				b.StopTimer()
				if err := waitCount(ctx, watcher, next.Prefix(), 2); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := term.Resign(ctx); err != nil {
					b.Fatal(err)
				}
				if term = <-ch; term == nil {
					b.FailNow()
				}
			}
			if err := term.Resign(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestRunSmall runs every workload of the program once, scaled down, and
// checks that each reports its figures for both implementations and that
// the invariants hold for baton: no mutual exclusion violated (contend
// fails otherwise), the queue drained in order, the cut-off holder told
// before the next one acquired.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every workload: about 25 s")
	}
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	rep, err := Run(ctx, srv.Server, Config{
		Runs: 1, Duration: 300 * time.Millisecond, Trials: 5, Settle: time.Millisecond,
		CrashTrials: 1, Held: 200, HeldWindow: time.Second, Waiters: 20,
		// A TTL a starved CI process cannot outlast: with the default 3 s the
		// etcd session itself ended under load ~22 (no renewal reply within
		// its TTL) and baton rightly failed Lock with ErrSessionClosed.
		HeldTTL:    15 * time.Second,
		ServeHolds: 100,
	}, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	seen := map[string]bool{}
	for _, m := range rep.Measures {
		seen[m.Workload] = true
		// The held workload measures baton once more per way its session
		// can be made; raw has one way. The service's round trip and
		// resident set, its closing cycle and its floors have no library
		// figure.
		batonOnly := m.Workload == "held" && strings.Contains(m.Metric, "(") ||
			m.Workload == "serve-cycle" && strings.HasPrefix(m.Metric, "round trip") ||
			strings.HasPrefix(m.Workload, "serve-") && (strings.HasPrefix(m.Metric, "floor ") || strings.HasPrefix(m.Metric, "closing ")) ||
			m.Workload == "serve-held" && (m.Metric == "RSS bytes/hold" || m.Metric == "stack bytes/hold")
		if len(m.Baton.Runs) != 1 || (len(m.Raw.Runs) != 1) != batonOnly {
			t.Errorf("%s %s: runs baton %v raw %v, want one each (baton's alone for a way of making baton's session)", m.Workload, m.Metric, m.Baton.Runs, m.Raw.Runs)
		}
	}
	for _, w := range Workloads() {
		if !seen[w] {
			t.Errorf("workload %s reported nothing", w)
		}
	}
	for _, c := range []struct{ workload, metric string }{
		{"waiters", "out of order"},
		{"crash", "trials zombie late"},
	} {
		m := find(rep, c.workload, c.metric)
		if m == nil {
			t.Errorf("%s %s missing", c.workload, c.metric)
			continue
		}
		if m.Baton.Max != 0 {
			t.Errorf("baton %s %s = %v, want 0", c.workload, c.metric, m.Baton.Max)
		}
	}
	var out strings.Builder
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "fdatasync") {
		t.Errorf("report lacks the fdatasync floor:\n%s", out.String())
	}
}
