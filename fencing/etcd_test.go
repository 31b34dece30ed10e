package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/mutex"
)

// rawHolder is a Holder whose transactions run on a plain client with no
// ownership compare: it lets a test present any token.
type rawHolder struct {
	cli *clientv3.Client
	t   fencing.Token
}

func (h rawHolder) Token() fencing.Token                 { return h.t }
func (h rawHolder) Txn(ctx context.Context) clientv3.Txn { return h.cli.Txn(ctx) }

// freshNS returns a namespace no earlier run used, so that -count=N starts
// from no marks.
func freshNS(prefix string) string { return fmt.Sprintf("%s-%x", prefix, rand.Uint32()) }

func newEtcdGuard(t *testing.T, opts ...fencing.Option) *fencing.EtcdGuard {
	t.Helper()
	g, err := fencing.NewEtcdGuard(srv.Client(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestEtcdGuardAdmitsEqualAndHigherRejectsLower(t *testing.T) {
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.WarnLevel)
	g := newEtcdGuard(t, fencing.WithNamespace(freshNS("admit-order")), fencing.WithRegisterer(reg), fencing.WithLogger(zap.New(core)))
	ctx := ctxTimeout(t, 10*time.Second)
	const res = "orders/eu"

	steps := []struct {
		token   fencing.Token
		stale   bool
		highest fencing.Token
	}{
		{10, false, 10},
		{10, false, 10}, // the same holder writes again
		{12, false, 12},
		{11, true, 12},
		{1, true, 12},
		{12, false, 12},
		{500, false, 500},
	}
	for i, s := range steps {
		err := g.Admit(ctx, res, s.token)
		if s.stale {
			var se *fencing.StaleError
			if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("step %d: Admit(%d) = %v, want a *StaleError", i, s.token, err)
			}
			if se.Resource != res || se.Token != s.token || se.Highest != s.highest {
				t.Fatalf("step %d: stale error %+v, want resource %q token %d highest %d", i, *se, res, s.token, s.highest)
			}
		} else if err != nil {
			t.Fatalf("step %d: Admit(%d) = %v, want nil", i, s.token, err)
		}
		high, err := g.Highest(ctx, res)
		if err != nil || high != s.highest {
			t.Fatalf("step %d: Highest = %d, %v; want %d", i, high, err, s.highest)
		}
	}
	wantRejections(t, reg, res, 2)
	entries := logs.FilterMessage("stale fencing token rejected").AllUntimed()
	if len(entries) != 2 {
		t.Fatalf("%d rejection log entries, want 2", len(entries))
	}
	f := entries[0].ContextMap()
	if f["resource"] != res || f["token"] != int64(11) || f["highest"] != int64(12) {
		t.Fatalf("rejection logged with fields %v, want resource, token 11, highest 12", f)
	}
}

// wantRejections fails t unless reg counts n rejections of resource.
func wantRejections(t *testing.T, reg *prometheus.Registry, resource string, n int) {
	t.Helper()
	want := fmt.Sprintf(`# HELP baton_fencing_rejections_total Writes rejected for carrying a stale fencing token.
# TYPE baton_fencing_rejections_total counter
baton_fencing_rejections_total{resource=%q} %d
`, resource, n)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_fencing_rejections_total"); err != nil {
		t.Fatal(err)
	}
}

func TestEtcdGuardKeyLayoutEscapesResource(t *testing.T) {
	ns := freshNS("team-a")
	g := newEtcdGuard(t, fencing.WithNamespace(ns))
	ctx := ctxTimeout(t, 10*time.Second)
	cli := srv.Client(t)
	for _, tc := range []struct{ resource, key string }{
		{"jobs", "/" + ns + "/v1/fence/jobs"},
		{"jobs/x", "/" + ns + "/v1/fence/jobs%2Fx"},
		{"a%2F", "/" + ns + "/v1/fence/a%252F"},
	} {
		if got := g.Key(tc.resource); got != tc.key {
			t.Fatalf("Key(%q) = %q, want %q", tc.resource, got, tc.key)
		}
		if err := g.Admit(ctx, tc.resource, 7); err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "7" || resp.Kvs[0].Lease != 0 {
			t.Fatalf("key %s: %v, want value 7 with no lease", tc.key, resp.Kvs)
		}
	}
	// "jobs" and "jobs/x" are distinct marks.
	if err := g.Admit(ctx, "jobs/x", 9); err != nil {
		t.Fatal(err)
	}
	if h, _ := g.Highest(ctx, "jobs"); h != 7 {
		t.Fatalf("Highest(jobs) = %d after raising jobs/x, want 7", h)
	}
}

func TestEtcdGuardRejectsMalformedTokens(t *testing.T) {
	g := newEtcdGuard(t, fencing.WithNamespace(freshNS("malformed")))
	ctx := ctxTimeout(t, 10*time.Second)
	for _, tok := range []fencing.Token{0, -1} {
		if err := g.Admit(ctx, "r", tok); !errors.Is(err, fencing.ErrMalformed) {
			t.Fatalf("Admit(%d) = %v, want ErrMalformed", tok, err)
		}
	}
	if _, err := srv.Client(t).Put(ctx, g.Key("corrupt"), "seven"); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "corrupt", 3); !errors.Is(err, fencing.ErrMalformed) {
		t.Fatalf("Admit over a corrupt mark = %v, want ErrMalformed", err)
	}
}

func TestEtcdGuardWriteAppliesOpsWithOwnership(t *testing.T) {
	cli := srv.Client(t)
	ctx := ctxTimeout(t, 20*time.Second)
	ns := freshNS("write-own")
	g := newEtcdGuard(t, fencing.WithNamespace(ns))
	m, err := mutex.New(cli, "report", mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	lock, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	resp, err := g.Write(ctx, lock, "report", clientv3.OpPut("/data/report", "v1"), clientv3.OpGet("/data/report"))
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if len(resp.Responses) != 2 || resp.Responses[0].GetResponsePut() == nil ||
		string(resp.Responses[1].GetResponseRange().GetKvs()[0].Value) != "v1" {
		t.Fatalf("Write responses = %v, want the put's and the get's", resp.Responses)
	}
	if h, _ := g.Highest(ctx, "report"); h != lock.Token() {
		t.Fatalf("Highest = %d, want the lock's token %d", h, lock.Token())
	}
	// Writing again with the same token takes the one-round-trip path.
	if _, err := g.Write(ctx, lock, "report", clientv3.OpPut("/data/report", "v2")); err != nil {
		t.Fatalf("second Write: %v", err)
	}

	// A higher token admitted elsewhere makes the holder stale: nothing applies.
	if err := g.Admit(ctx, "report", lock.Token()+100); err != nil {
		t.Fatal(err)
	}
	_, err = g.Write(ctx, lock, "report", clientv3.OpPut("/data/report", "stale"))
	if !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Write after a higher admit = %v, want ErrStale", err)
	}
	if v := get(t, cli, "/data/report"); v != "v2" {
		t.Fatalf("value after stale write = %q, want v2", v)
	}

	// A released lock applies nothing and says so with the holder's error.
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = g.Write(ctx, lock, "other", clientv3.OpPut("/data/report", "late"))
	if !errors.Is(err, mutex.ErrNotHeld) {
		t.Fatalf("Write after Unlock = %v, want mutex.ErrNotHeld", err)
	}
	if v := get(t, cli, "/data/report"); v != "v2" {
		t.Fatalf("value after a write by a released lock = %q, want v2", v)
	}
	if h, _ := g.Highest(ctx, "other"); h != 0 {
		t.Fatalf("released lock raised the mark of \"other\" to %d", h)
	}
}

func get(t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(ctxTimeout(t, 5*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func TestEtcdGuardWriteRefusesOpsOnTheFenceKey(t *testing.T) {
	g := newEtcdGuard(t, fencing.WithNamespace(freshNS("fence-ops")))
	h := rawHolder{cli: srv.Client(t), t: 5}
	ctx := ctxTimeout(t, 10*time.Second)
	key := g.Key("r")
	for _, tc := range []struct {
		name string
		op   clientv3.Op
		bad  bool
	}{
		{"put fence", clientv3.OpPut(key, "9"), true},
		{"delete fence", clientv3.OpDelete(key), true},
		{"delete prefix over fence", clientv3.OpDelete(key[:len(key)-1], clientv3.WithPrefix()), true},
		{"delete from key on", clientv3.OpDelete("/", clientv3.WithFromKey()), true},
		{"get fence", clientv3.OpGet(key), false},
		{"put elsewhere", clientv3.OpPut("/elsewhere", "x"), false},
		{"delete range before fence", clientv3.OpDelete("/a", clientv3.WithRange("/b")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := g.Write(ctx, h, "r", tc.op)
			if tc.bad != errors.Is(err, fencing.ErrInvalid) {
				t.Fatalf("Write(%s) = %v, want ErrInvalid: %v", tc.name, err, tc.bad)
			}
			if !tc.bad && err != nil {
				t.Fatalf("Write(%s) = %v", tc.name, err)
			}
		})
	}
}

// TestEtcdGuardConcurrentWritersCommitInTokenOrder has writers on separate
// clients (as separate processes would be) present rising tokens for one
// resource, interleaved, with now and then a stale one. Every committed write, in revision order, must carry a token
// at least as high as every write committed before it, and every rejection
// must name a higher mark.
func TestEtcdGuardConcurrentWritersCommitInTokenOrder(t *testing.T) {
	const writers, perWriter = 6, 25
	ctx := ctxTimeout(t, 60*time.Second)
	// Fresh names, so that -count=N starts from no mark.
	resource := fmt.Sprintf("shared-%x", rand.Uint64())
	dataKey := "/concurrent-data/" + resource
	type commit struct {
		rev   int64
		token fencing.Token
	}
	var (
		mu       sync.Mutex
		commits  []commit
		rejected int
	)
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		cli, err := srv.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		g, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace("concurrent"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				tok := fencing.Token(i*writers + w + 3*writers + 1)
				if rand.IntN(4) == 0 {
					tok -= fencing.Token(1 + rand.IntN(3*writers))
				}
				resp, err := g.Write(ctx, rawHolder{cli: cli, t: tok}, resource,
					clientv3.OpPut(dataKey, tok.String()))
				var se *fencing.StaleError
				switch {
				case err == nil:
					mu.Lock()
					commits = append(commits, commit{resp.Header.Revision, tok})
					mu.Unlock()
				case errors.As(err, &se):
					if se.Highest <= tok {
						errc <- fmt.Errorf("token %d rejected with highest %d", tok, se.Highest)
						return
					}
					mu.Lock()
					rejected++
					mu.Unlock()
				case errors.Is(err, fencing.ErrContended):
					// Allowed: the bound was reached; nothing was written.
				default:
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	slices.SortFunc(commits, func(a, b commit) int { return int(a.rev - b.rev) })
	for i := 1; i < len(commits); i++ {
		if commits[i].token < commits[i-1].token {
			t.Fatalf("token %d committed at revision %d after token %d at revision %d",
				commits[i].token, commits[i].rev, commits[i-1].token, commits[i-1].rev)
		}
		if commits[i].rev == commits[i-1].rev {
			t.Fatalf("two commits at revision %d", commits[i].rev)
		}
	}
	last := commits[len(commits)-1].token
	if v := get(t, srv.Client(t), dataKey); v != last.String() {
		t.Fatalf("final value %q, want the last committed token %d", v, last)
	}
	if len(commits) == 0 || rejected == 0 {
		t.Fatalf("%d commits, %d rejections: the test exercised nothing", len(commits), rejected)
	}
	t.Logf("%d commits, %d stale rejections", len(commits), rejected)
}

func TestOptionsAreValidated(t *testing.T) {
	cli := srv.Client(t)
	for _, tc := range []struct {
		name string
		new  func() error
		want string // a fragment of the error; empty means no error
	}{
		{"etcd defaults", func() error { _, err := fencing.NewEtcdGuard(cli); return err }, ""},
		{"etcd nil client", func() error { _, err := fencing.NewEtcdGuard(nil); return err }, "client must not be nil"},
		{"etcd bad namespace", func() error {
			_, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace("a/b"))
			return err
		}, "WithNamespace"},
		{"etcd long namespace", func() error {
			_, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace(string(make([]byte, 65))))
			return err
		}, "at most 64"},
		{"etcd takes no table", func() error {
			_, err := fencing.NewEtcdGuard(cli, fencing.WithTable("t"))
			return err
		}, "does not take WithTable"},
		{"etcd nil option", func() error { _, err := fencing.NewEtcdGuard(cli, nil); return err }, "nil option"},
		{"etcd nil logger", func() error {
			_, err := fencing.NewEtcdGuard(cli, fencing.WithLogger(nil))
			return err
		}, "WithLogger(nil)"},
		{"etcd nil tracer provider", func() error {
			_, err := fencing.NewEtcdGuard(cli, fencing.WithTracerProvider(nil))
			return err
		}, "WithTracerProvider(nil)"},
		{"memory nil tracer provider", func() error {
			_, err := fencing.NewMemoryGuardWith(fencing.WithTracerProvider(nil))
			return err
		}, "WithTracerProvider(nil)"},
		{"sql tracer provider", func() error {
			_, err := fencing.NewSQLGuard(fencing.SQLite, fencing.WithTracerProvider(noop.NewTracerProvider()))
			return err
		}, ""},
		{"sql defaults", func() error { _, err := fencing.NewSQLGuard(fencing.Postgres); return err }, ""},
		{"etcd label limit 1", func() error {
			_, err := fencing.NewEtcdGuard(cli, fencing.WithMetricLabelLimit(1))
			return err
		}, ""},
		{"etcd label limit 0", func() error {
			_, err := fencing.NewEtcdGuard(cli, fencing.WithMetricLabelLimit(0))
			return err
		}, "NewEtcdGuard: WithMetricLabelLimit(0): must be at least 1 and at most 10000"},
		{"memory label limit max", func() error {
			_, err := fencing.NewMemoryGuardWith(fencing.WithMetricLabelLimit(10000))
			return err
		}, ""},
		{"memory label limit past max", func() error {
			_, err := fencing.NewMemoryGuardWith(fencing.WithMetricLabelLimit(10001))
			return err
		}, "WithMetricLabelLimit(10001): must be at least 1 and at most 10000"},
		{"sql label limit negative", func() error {
			_, err := fencing.NewSQLGuard(fencing.SQLite, fencing.WithMetricLabelLimit(-1))
			return err
		}, "NewSQLGuard: WithMetricLabelLimit(-1)"},
		{"sql schema table", func() error {
			_, err := fencing.NewSQLGuard(fencing.SQLite, fencing.WithTable("app.fence_marks"))
			return err
		}, ""},
		{"sql no dialect", func() error { _, err := fencing.NewSQLGuard(0); return err }, "want Postgres or SQLite"},
		{"sql injection in table", func() error {
			_, err := fencing.NewSQLGuard(fencing.Postgres, fencing.WithTable("t; DROP TABLE x"))
			return err
		}, "WithTable"},
		{"sql table too long", func() error {
			_, err := fencing.NewSQLGuard(fencing.Postgres, fencing.WithTable("t"+string(slices.Repeat([]byte("x"), 63))))
			return err
		}, "1 to 63"},
		{"sql table starts with digit", func() error {
			_, err := fencing.NewSQLGuard(fencing.Postgres, fencing.WithTable("1t"))
			return err
		}, "WithTable"},
		{"sql takes no namespace", func() error {
			_, err := fencing.NewSQLGuard(fencing.Postgres, fencing.WithNamespace("ns"))
			return err
		}, "does not take WithNamespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if !errors.Is(err, fencing.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}
