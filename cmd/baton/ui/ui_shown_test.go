package ui_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/rwmutex"
	"github.com/batonhq/baton/semaphore"
)

// Names and holders are anyone's text: a right-to-left override in a
// semaphore's or a read/write lock's name or holder is shown as \u202e on
// every part of the page (rows, lanes, bar labels, titles), never applied,
// so "invoice\u202efdp.exe" cannot pass for "invoiceexe.pdf".
func TestUIInBrowserShowsFormatCharactersInNames(t *testing.T) {
	const ns = "ui-shown"
	const name = "invoice\u202efdp.exe"
	const holder = "host\u2066\u200b\u2028-a"
	ctx := browser(t, 1280, 900)
	url := serveUI(t, ns)
	cli := clitest.Srv.Client(t)

	s, err := semaphore.New(cli, name, 2, semaphore.WithNamespace(ns), semaphore.WithIdentity(holder))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(clitest.TestContext(t)); err != nil {
		t.Fatal(err)
	}
	rw, err := rwmutex.New(cli, name, rwmutex.WithNamespace(ns), rwmutex.WithIdentity(holder))
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.Lock(clitest.TestContext(t)); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitKeys(t, cli, "/"+ns+"/v1/rwlock/", 1)

	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "both rows", `document.querySelectorAll("#semaphores-body tr").length === 1 && document.querySelectorAll("#rwlocks-body tr").length === 1 && document.querySelectorAll("#chart .span").length === 2`)
	const raw = `/[\u202a-\u202e\u2066-\u2069\u200b\u200e\u200f\u2028\u2029]/`
	if bad := evalJS[string](t, ctx, `(() => {
		const re = `+raw+`;
		for (const e of document.querySelectorAll("body *")) {
			for (const n of e.childNodes) if (n.nodeType === Node.TEXT_NODE && re.test(n.data)) return e.tagName + ": " + JSON.stringify(n.data);
			for (const a of e.attributes) if (!a.name.startsWith("data-") && re.test(a.value)) return e.tagName + "@" + a.name + ": " + JSON.stringify(a.value);
		}
		return ""; })()`); bad != "" {
		t.Fatalf("a format character reaches the page as is: %s", bad)
	}
	for _, sel := range []string{"#semaphores-body tr th", "#rwlocks-body tr th"} {
		got := evalJS[string](t, ctx, `document.querySelector("`+sel+`").textContent`)
		if want := `invoice\u202efdp.exe`; got != want {
			t.Errorf("%s shows %q, want %q", sel, got, want)
		}
	}
	if got := evalJS[string](t, ctx, `document.querySelector("#rwlocks-body .writer").textContent`); got != `host\u2066\u200b\u2028-a` {
		t.Errorf("the writer shows as %q", got)
	}
}
