package ui_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/ui"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// TestUIStateShowsSetMembersLockDelayAndReleaseRequest: the page's state
// names the other members of a set beside each of its keys, a pending
// release request (who asked, the reason as given) on the holder it was
// made to, and a running lock-delay with its time left.
func TestUIStateShowsSetMembersLockDelayAndReleaseRequest(t *testing.T) {
	ns := fmt.Sprintf("ui-lockstate-%d", time.Now().UnixNano())
	st := startUIState(t, ns)
	ctx := etcdtest.Context(t, 40*time.Second)
	cli := clitest.Srv.Client(t)
	set, err := mutex.NewSet(cli, []string{"a", "b", "c"}, mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	l, err := set.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	s := waitSnapshot(t, st, "the set's three keys", func(s ui.Snapshot) bool {
		for _, n := range []string{"a", "b", "c"} {
			if o := objectOf(s, "lock", n); o == nil || len(o.Queue) != 1 {
				return false
			}
		}
		return true
	})
	for n, want := range map[string][]string{"a": {"b", "c"}, "b": {"a", "c"}, "c": {"a", "b"}} {
		if got := objectOf(s, "lock", n).Queue[0].Set; !slices.Equal(got, want) {
			t.Errorf("lock %q: set members %q, want %q", n, got, want)
		}
	}

	const reason = "<b>deploy</b> \u202e please"
	if err := mutex.RequestRelease(ctx, cli, "b", reason, mutex.WithNamespace(ns), mutex.WithIdentity("op-1")); err != nil {
		t.Fatal(err)
	}
	s = waitSnapshot(t, st, "the release request on b's holder", func(s ui.Snapshot) bool {
		o := objectOf(s, "lock", "b")
		return o != nil && len(o.Queue) == 1 && o.Queue[0].Release != nil
	})
	if r := objectOf(s, "lock", "b").Queue[0].Release; r.Reason != reason || r.By != "op-1" || r.At == "" {
		t.Fatalf("release request %+v; want reason %q by op-1", r, reason)
	}
	if o := objectOf(s, "lock", "a"); o.Queue[0].Release != nil {
		t.Fatalf("a request to b shows on a: %+v", o.Queue[0].Release)
	}

	clitest.LockDelayScene(t, ns, "d", 3*time.Second)
	s = waitSnapshot(t, st, "a running lock-delay on d with its time left", func(s ui.Snapshot) bool {
		o := objectOf(s, "lock", "d")
		return o != nil && len(o.Delays) == 1 && o.Delays[0].LeftMs > 0
	})
	if d := objectOf(s, "lock", "d").Delays[0]; d.DelayMs != 3000 || d.LeftMs > 3000 || d.Token <= 0 {
		t.Fatalf("delay %+v; want 3 s with at most 3 s left", d)
	}
	waitSnapshot(t, st, "the lock-delay's end", func(s ui.Snapshot) bool {
		o := objectOf(s, "lock", "d")
		return o == nil || len(o.Delays) == 0
	})
}

// TestUIInBrowserShowsSetDelayAndReleaseRequest: the page shows a set's
// other members beside its holder, a release request's requester and
// reason as text (markup and a bidi override in it are not applied), and
// a running lock-delay counting down.
func TestUIInBrowserShowsSetDelayAndReleaseRequest(t *testing.T) {
	ns := fmt.Sprintf("ui-lockstate-b-%d", time.Now().UnixNano())
	bctx := browser(t, 1280, 900)
	url := serveUI(t, ns)
	ctx := etcdtest.Context(t, 40*time.Second)
	cli := clitest.Srv.Client(t)
	set, err := mutex.NewSet(cli, []string{"a", "b"}, mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	l, err := set.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	const reason = "<img src=x onerror=alert(1)> \u202efdp.exe"
	if err := mutex.RequestRelease(ctx, cli, "a", reason, mutex.WithNamespace(ns), mutex.WithIdentity("op <i>1</i>")); err != nil {
		t.Fatal(err)
	}
	clitest.LockDelayScene(t, ns, "d", 4*time.Second)
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, bctx, 5*time.Second, "set, request and delay", `(() => {
		const a = document.querySelector('#locks-body tr[data-name="a"]'), d = document.querySelector('#locks-body tr[data-name="d"] .delay');
		return !!a && !!a.querySelector(".set") && !!a.querySelector(".release") && !!d && /^lock-delay: [1-4]s of 4s left$/.test(d.textContent); })()`)
	if got := evalJS[string](t, bctx, `document.querySelector('#locks-body tr[data-name="a"] .set').textContent`); got != "set with b" {
		t.Errorf("a's set shows %q", got)
	}
	if got := evalJS[string](t, bctx, `document.querySelector('#locks-body tr[data-name="a"] .release').textContent`); got != `release requested by op <i>1</i>: <img src=x onerror=alert(1)> \u202efdp.exe` {
		t.Errorf("the request shows as %q", got)
	}
	if n := evalJS[float64](t, bctx, `document.querySelectorAll("main img, main i").length`); n != 0 {
		t.Errorf("the requester's markup became %v element(s)", n)
	}
}
