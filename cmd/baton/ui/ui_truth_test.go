package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/ui"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
)

// kindsScene holds, in namespace ns, a semaphore "exports" with limit 2
// and 3 contenders (one waiting), and a read/write lock "catalog" with 2
// readers and a waiting writer. Everything is released with the test.
func kindsScene(t *testing.T, cli *clientv3.Client, ns string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range 3 {
		s, err := semaphore.New(cli, "exports", 2, semaphore.WithNamespace(ns), semaphore.WithIdentity(fmt.Sprintf("exporter-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if i < 2 {
			if _, err := s.Acquire(clitest.TestContext(t)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		wg.Go(func() { _, _ = s.Acquire(ctx) })
	}
	for i := range 3 {
		rw, err := rwmutex.New(cli, "catalog", rwmutex.WithNamespace(ns), rwmutex.WithIdentity(fmt.Sprintf("catalog-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rw.Close() })
		if i < 2 {
			if _, err := rw.RLock(clitest.TestContext(t)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		wg.Go(func() { _, _ = rw.Lock(ctx) })
	}
	etcdtest.WaitKeys(t, cli, "/"+ns+"/v1/semaphore/exports/", 3)
	etcdtest.WaitKeys(t, cli, "/"+ns+"/v1/rwlock/catalog/", 3)
}

func objectOf(s ui.Snapshot, kind, name string) *ui.Object {
	for i := range s.Objects {
		if s.Objects[i].Kind == kind && s.Objects[i].Name == name {
			return &s.Objects[i]
		}
	}
	return nil
}

func TestUIStateShowsSemaphoresAndReadWriteLocks(t *testing.T) {
	ns := fmt.Sprintf("ui-kinds-%d", time.Now().UnixNano())
	st := startUIState(t, ns)
	kindsScene(t, clitest.Srv.Client(t), ns)
	s := waitSnapshot(t, st, "a semaphore 2/2 with a waiter and a read/write lock with 2 readers and a waiting writer", func(s ui.Snapshot) bool {
		sem, rw := objectOf(s, "semaphore", "exports"), objectOf(s, "rwlock", "catalog")
		return sem != nil && sem.Holders == 2 && sem.Limit == 2 && sem.Waiters == 1 &&
			rw != nil && rw.Readers == 2 && !rw.Writer && rw.Waiters == 1
	})
	rw := objectOf(s, "rwlock", "catalog")
	if q := rw.Queue; len(q) != 3 || q[0].Mode != "read" || !q[0].Holding || q[2].Mode != "write" || q[2].Holding {
		t.Fatalf("read/write queue %+v", q)
	}
	open := 0
	for _, sp := range s.Spans {
		if sp.End == nil && (sp.Kind == "semaphore" || sp.Kind == "rwlock") {
			open++
		}
	}
	if open != 4 {
		t.Fatalf("%d open timeline spans for the semaphore and read/write lock, want 4 (2 permits, 2 readers): %+v", open, s.Spans)
	}
}

// restartable is an etcd member that can be stopped and started again on
// the same ports and data.
type restartable struct {
	cfg etcdtest.Config
	srv *etcdtest.Server
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	client, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	r := &restartable{cfg: etcdtest.Config{Name: "restartable", Dir: filepath.Join(t.TempDir(), "data"), ClientAddr: client, PeerAddr: peer}}
	r.start(t)
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *restartable) start(t *testing.T) {
	t.Helper()
	s, err := etcdtest.New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = s
}

func (r *restartable) stop() {
	if r.srv != nil {
		r.srv.Stop()
		r.srv = nil
	}
}

func (r *restartable) endpoint() string { return "http://" + r.cfg.ClientAddr }

func TestUIStateSaysEtcdIsUnreachableAndRecovers(t *testing.T) {
	e := startRestartable(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st := ui.NewState(cli, "ui-outage", time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = st.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	if _, err := cli.Put(clitest.TestContext(t), "/ui-outage/v1/lock/job/1", "holder"); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, st, "live with the lock", func(s ui.Snapshot) bool {
		return s.Connected && !s.Unreachable && objectOf(s, "lock", "job") != nil
	})

	// The embedded member stops answering at once but takes seconds to
	// exit: the state must say so while it is still exiting, or soon after.
	said := make(chan time.Time, 1)
	go func() {
		waitSnapshot(t, st, "unreachable", func(s ui.Snapshot) bool { return s.Unreachable && !s.Connected })
		said <- time.Now()
	}()
	stopping := time.Now()
	e.stop()
	stopped := time.Now()
	var saidAt time.Time
	select {
	case saidAt = <-said:
	case <-time.After(5 * time.Second):
		t.Fatalf("the state did not say etcd is unreachable within 5 s of the member's exit (%v to exit)", stopped.Sub(stopping))
	}
	t.Logf("FIGURE etcd stop begun to the state saying unreachable: %v (the member took %v to exit)",
		saidAt.Sub(stopping).Round(time.Millisecond), stopped.Sub(stopping).Round(time.Millisecond))
	s := st.Snapshot()
	// DownSince is when the first unanswered probe began: at most its
	// deadline (and a scheduling delay) before the stop.
	if s.DownSince == nil || s.DownSince.Before(stopping.Add(-ui.ProbeWithin-time.Second)) || s.DownSince.After(stopped) ||
		!strings.HasPrefix(s.Problem, "etcd unreachable since "+s.DownSince.Format("15:04:05")) || s.AsOf == nil {
		t.Fatalf("unreachable state: since %v, as of %v, problem %q (stopping at %v, stopped at %v)", s.DownSince, s.AsOf, s.Problem, stopping, stopped)
	}
	// It stays so: a watch retried silently does not make it live again.
	time.Sleep(3 * ui.ProbeEvery)
	if s := st.Snapshot(); !s.Unreachable || s.Connected {
		t.Fatalf("%v after the stop: unreachable %v, connected %v", time.Since(stopped), s.Unreachable, s.Connected)
	}

	e.start(t)
	back := time.Now()
	waitSnapshot(t, st, "live again", func(s ui.Snapshot) bool { return s.Connected && !s.Unreachable && s.DownSince == nil })
	t.Logf("FIGURE etcd back to the state live again: %v", time.Since(back).Round(time.Millisecond))
	// And it follows changes again.
	if _, err := cli.Delete(clitest.TestContext(t), "/ui-outage/v1/lock/job/1"); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, st, "the lock released after the outage", func(s ui.Snapshot) bool { return objectOf(s, "lock", "job") == nil })
}

// baton ui started while etcd is down serves the page, says so, and goes
// live when etcd answers.
func TestUIServesThePageWhileEtcdIsDown(t *testing.T) {
	e := startRestartable(t)
	e.stop()
	addr, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut clitest.SyncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- clitest.RunTo(ctx, "ui-down", &out, &errOut, "--endpoints", e.endpoint(), "--dial-timeout", "500ms", "ui", "--listen", addr)
	}()
	defer func() {
		cancel()
		if code := <-exited; code != cmdutil.ExitOK {
			t.Errorf("baton ui exited %d: %s", code, errOut.String())
		}
	}()
	base := "http://" + addr
	clitest.WaitStatus(t, base+"/", 200)
	state := func() ui.Snapshot {
		_, body, err := clitest.HttpGet(t, base+"/state.json")
		var s ui.Snapshot
		if err != nil || json.Unmarshal([]byte(body), &s) != nil {
			t.Fatalf("state.json: %v %q", err, body)
		}
		return s
	}
	if s := state(); !s.Unreachable || s.Connected || !strings.Contains(s.Problem, "etcd unreachable since") {
		t.Fatalf("state while etcd is down: %+v", s)
	}
	if !strings.Contains(errOut.String(), "serving the page anyway") {
		t.Fatalf("stderr: %s", errOut.String())
	}
	e.start(t)
	deadline := time.Now().Add(10 * time.Second)
	for s := state(); !s.Connected; s = state() {
		if time.Now().After(deadline) {
			t.Fatalf("not live within 10 s of etcd's start: %+v", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The page in a browser: semaphore and read/write lock rows with the right
// counts, every etcd member killed said within 5 s, live again within 5 s
// of quorum, without a reload.
func TestUIInBrowserTellsTheTruthInAnOutage(t *testing.T) {
	const ns = "ui-truth"
	ctx := browser(t, 1280, 900)
	e := startRestartable(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	kindsScene(t, cli, ns)

	addr, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	uctx, cancel := context.WithCancel(context.Background())
	var errOut clitest.SyncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- clitest.RunTo(uctx, ns, &clitest.SyncBuffer{}, &errOut, "--endpoints", e.endpoint(), "ui", "--listen", addr)
	}()
	defer func() {
		cancel()
		if code := <-exited; code != cmdutil.ExitOK {
			t.Errorf("baton ui exited %d: %s", code, errOut.String())
		}
	}()
	url := "http://" + addr + "/"
	clitest.WaitStatus(t, url, 200)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the semaphore 2/2 with one waiter",
		`[...document.querySelectorAll("#semaphores-body tr")].some(r => r.dataset.name === "exports" && r.dataset.holders === "2" && r.dataset.limit === "2" && r.dataset.waiters === "1" && r.querySelector(".holders").textContent === "2/2")`)
	waitJS(t, ctx, 5*time.Second, "the read/write lock with 2 readers and a waiting writer",
		`[...document.querySelectorAll("#rwlocks-body tr")].some(r => r.dataset.name === "catalog" && r.dataset.readers === "2" && r.dataset.writer === "0" && r.dataset.waiters === "1")`)
	waitJS(t, ctx, 5*time.Second, "their timeline lanes",
		`(() => { const l = [...document.querySelectorAll("#chart text.label")].map(t => t.firstChild.textContent);
			const bars = k => [...document.querySelectorAll("#chart rect.span")].filter(r => r.dataset.kind === k && !r.dataset.end).length;
			return l.includes("S exports") && l.includes("RW catalog") && bars("semaphore") === 2 && bars("rwlock") === 2; })()`)
	waitJS(t, ctx, 5*time.Second, "live", `document.getElementById("status").textContent.startsWith("Live")`)

	// Every member killed (one here): the page says so within 5 s.
	killed := time.Now()
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	waitJS(t, ctx, 5*time.Second, "etcd unreachable", `document.getElementById("status").textContent.startsWith("etcd unreachable since ") && document.querySelector("main").classList.contains("stale") && !document.getElementById("stale-note").hidden`)
	t.Logf("FIGURE member killed to the page saying etcd unreachable: %v", time.Since(killed).Round(time.Millisecond))
	<-stopped
	// Still so a while later: nothing pretends to be live.
	time.Sleep(2 * time.Second)
	if live := evalJS[bool](t, ctx, `document.getElementById("status").textContent.startsWith("Live")`); live {
		t.Fatal("the page says live with etcd gone")
	}

	// Back: live again within 5 s of quorum, without a reload.
	e.start(t)
	quorum := time.Now()
	waitJS(t, ctx, 5*time.Second, "live again", `document.getElementById("status").textContent.startsWith("Live") && !document.querySelector("main").classList.contains("stale")`)
	t.Logf("FIGURE quorum back to the page live again: %v", time.Since(quorum).Round(time.Millisecond))
	if n := evalJS[int](t, ctx, `performance.getEntriesByType("navigation").length`); n != 1 {
		t.Fatalf("%d navigations: the page reloaded", n)
	}
}
