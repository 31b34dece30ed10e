package sharding_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/integration/sharding"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/router"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(etcdtest.IgnoredGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// scale is runs, run duration and goroutines per namespace: a full
// measure with BATON_SHARD_BENCH=1, one short round otherwise.
func scale() (runs int, d time.Duration, perNS int) {
	if os.Getenv("BATON_SHARD_BENCH") == "" {
		return 1, 300 * time.Millisecond, 2
	}
	runs, d, perNS = 5, 3*time.Second, 8
	if v, err := strconv.Atoi(os.Getenv("BATON_SHARD_RUNS")); err == nil && v > 0 {
		runs = v
	}
	if v, err := time.ParseDuration(os.Getenv("BATON_SHARD_DURATION")); err == nil && v > 0 {
		d = v
	}
	if v, err := strconv.Atoi(os.Getenv("BATON_SHARD_GOROUTINES")); err == nil && v > 0 {
		perNS = v
	}
	return
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func newRouter(t *testing.T, m router.Map) *router.Router {
	t.Helper()
	r, err := router.New(m, router.WithDialTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// Aggregate acquisitions/s of a workload spread on two namespaces, with
// both namespaces on one cluster and with one cluster each, alternating
// which goes first. Both clusters run in both cases, so that the
// machine's load is the same.
func TestFiguresOneClusterVersusTwo(t *testing.T) {
	runs, d, perNS := scale()
	a := etcdtest.Start(t, etcdtest.Config{Name: "a"})
	b := etcdtest.Start(t, etcdtest.Config{Name: "b"})
	one := newRouter(t, router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: a.Endpoints(), Namespaces: []string{"payments", "jobs"}},
		{Name: "b", Endpoints: b.Endpoints()},
	}})
	two := newRouter(t, router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: a.Endpoints(), Namespaces: []string{"payments"}},
		{Name: "b", Endpoints: b.Endpoints(), Namespaces: []string{"jobs"}},
	}})
	ctx := etcdtest.Context(t, time.Duration(runs)*4*(d+10*time.Second))
	ns := []string{"payments", "jobs"}
	var rate1, rate2, p99one, p99two []float64
	t.Logf("FIGURE setup: %d CPUs, %d runs of %v each, %d goroutines per namespace, load %s", runtime.NumCPU(), runs, d, perNS, loadavg())
	for i := range runs {
		order := []*router.Router{one, two}
		if i%2 == 1 {
			order = []*router.Router{two, one}
		}
		for _, r := range order {
			c, err := sharding.Spread(ctx, r, ns, perNS, d, true)
			if err != nil {
				t.Fatal(err)
			}
			if r == one {
				rate1, p99one = append(rate1, c.PerSecond()), append(p99one, sharding.Ms(c.Percentile(99)))
			} else {
				rate2, p99two = append(rate2, c.PerSecond()), append(p99two, sharding.Ms(c.Percentile(99)))
			}
		}
	}
	s1, s2 := harness.Summarize(rate1), harness.Summarize(rate2)
	t.Logf("FIGURE acquisitions/s, 1 cluster: %v", s1)
	t.Logf("FIGURE acquisitions/s, 2 clusters: %v", s2)
	t.Logf("FIGURE ratio 2/1 of medians: %.2f", s2.Median/s1.Median)
	t.Logf("FIGURE cycle p99 ms, 1 cluster: %v; 2 clusters: %v", harness.Summarize(p99one), harness.Summarize(p99two))
	t.Logf("FIGURE load after: %s", loadavg())
}

// jobs' cycles on b, one goroutine, while payments cycles on a; then a
// stops and payments keeps trying. No jobs call may fail; the p99 with a
// down is reported next to the p99 with a up, run by run.
func TestFiguresOneClusterDown(t *testing.T) {
	runs, d, _ := scale()
	b := etcdtest.Start(t, etcdtest.Config{Name: "b"})
	ctx := etcdtest.Context(t, time.Duration(runs)*4*(d+10*time.Second))
	var up, down []float64
	for range runs {
		a := etcdtest.Start(t, etcdtest.Config{Name: "a"})
		r := newRouter(t, router.Map{Clusters: []router.Cluster{
			{Name: "a", Endpoints: a.Endpoints(), Namespaces: []string{"payments"}},
			{Name: "b", Endpoints: b.Endpoints(), Namespaces: []string{"jobs"}},
		}})
		payCli, err := r.Client(ctx, "payments")
		if err != nil {
			t.Fatal(err)
		}
		pay, err := mutex.New(payCli, "busy", mutex.WithNamespace("payments"), mutex.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // payments' load: cycles while a is up, retries after
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				if l, err := pay.Lock(c); err == nil {
					_ = l.Unlock(c)
				}
				cancel()
			}
		})
		cu, err := sharding.Spread(ctx, r, []string{"jobs"}, 1, d, true)
		if err != nil {
			t.Fatalf("jobs with a up: %v", err)
		}
		a.Stop()
		cd, err := sharding.Spread(ctx, r, []string{"jobs"}, 1, d, true)
		if err != nil {
			t.Fatalf("jobs with a down: %v", err)
		}
		close(stop)
		wg.Wait()
		_ = pay.Close()
		if cd.Failed != 0 || len(cd.Latencies) == 0 {
			t.Fatalf("jobs with a down: %d failed calls, %d cycles", cd.Failed, len(cd.Latencies))
		}
		up, down = append(up, sharding.Ms(cu.Percentile(99))), append(down, sharding.Ms(cd.Percentile(99)))
		t.Logf("run: jobs p99 %.2f ms with a up (%d cycles), %.2f ms with a down (%d cycles, 0 failed)",
			up[len(up)-1], len(cu.Latencies), down[len(down)-1], len(cd.Latencies))
	}
	t.Logf("FIGURE jobs cycle p99 ms on b, a up: %v", harness.Summarize(up))
	t.Logf("FIGURE jobs cycle p99 ms on b, a down: %v", harness.Summarize(down))
}
