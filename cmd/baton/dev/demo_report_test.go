package dev

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
)

// demoFixture is a run as the demo records it: w1 leads with token 5,
// is frozen, w2 leads with token 9, w1's late write is rejected.
func demoFixture() *demoReport {
	at := func(ms int) time.Time { return clitest.T0.Add(time.Duration(ms) * time.Millisecond) }
	ledger := []ledgerEntry{
		{At: at(300), Worker: "w1", Token: 5, Seq: 1, Accepted: true, Record: 1},
		{At: at(450), Worker: "w1", Token: 5, Seq: 2, Accepted: true, Record: 2, Highest: 5},
		{At: at(600), Worker: "w1", Token: 5, Seq: 3, Accepted: true, Record: 3, Highest: 5},
		{At: at(2900), Worker: "w2", Token: 9, Seq: 1, Accepted: true, Record: 4, Highest: 5},
		{At: at(3050), Worker: "w2", Token: 9, Seq: 2, Accepted: true, Record: 5, Highest: 9},
		{At: at(3210), Worker: "w1", Token: 5, Seq: 4, Accepted: false, Highest: 9},
	}
	r := &demoReport{
		TTL: 2 * time.Second, Start: clitest.T0, End: at(3400), Ledger: ledger,
		Timeline: []timelineEntry{
			{At: at(100), Who: "etcd", What: "leader is w1 (token 5)"},
			{At: at(700), Who: "demo", What: "SIGSTOP w1 (token 5)"},
			{At: at(2800), Who: "etcd", What: "leader is w2 (token 9)"},
			{At: at(3200), Who: "demo", What: "SIGCONT w1"},
		},
		Leaders: []leaderSpan{
			{Worker: "w1", Token: 5, From: at(100), To: at(2800)},
			{Worker: "w2", Token: 9, From: at(2800), To: at(3400)},
		},
		Frozen: "w1", NewLeader: "w2", Failover: 2150 * time.Millisecond,
	}
	r.Zombie = &r.Ledger[5]
	r.Timeline = append(r.Timeline, ledgerTimeline(ledger)...)
	sortTimeline(r.Timeline)
	return r
}

func TestDemoReportGolden(t *testing.T) {
	var b bytes.Buffer
	demoFixture().write(&b)
	clitest.Golden(t, "demo-report.golden", b.Bytes())
}

func TestDemoChecks(t *testing.T) {
	cases := []struct {
		name     string
		breakIt  func(r *demoReport)
		failing  []string // the checks that must fail, and only they
		wantText string
	}{
		{name: "clean run"},
		{
			name: "stale write accepted",
			breakIt: func(r *demoReport) {
				r.Ledger[5].Accepted, r.Ledger[5].Record = true, 6
			},
			failing: []string{"accepted writes are in token order", "no write was accepted from a stale token",
				"the frozen leader's late write was rejected as stale"},
		},
		{
			name: "tokens out of order",
			breakIt: func(r *demoReport) {
				r.Ledger[4].Token = 4
			},
			failing: []string{"accepted writes are in token order", "no write was accepted from a stale token"},
		},
		{
			name: "current token rejected",
			breakIt: func(r *demoReport) {
				r.Ledger[4].Accepted = false
			},
			failing:  []string{"no write was accepted from a stale token"},
			wantText: "a current write from w2",
		},
		{
			name: "new leader with a lower token",
			breakIt: func(r *demoReport) {
				r.Leaders[1].Token = 3
			},
			failing: []string{"each new leader's token is higher than the last"},
		},
		{
			name:    "no late write",
			breakIt: func(r *demoReport) { r.Zombie = nil },
			failing: []string{"the frozen leader's late write was rejected as stale"},
		},
		{
			name:    "scenario stalled",
			breakIt: func(r *demoReport) { r.Problems = []string{"gave up"} },
			failing: []string{"the scenario played out"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := demoFixture()
			if c.breakIt != nil {
				c.breakIt(r)
			}
			cs := r.checks()
			if got := passed(cs); got != (len(c.failing) == 0) {
				t.Fatalf("passed = %v, checks %+v", got, cs)
			}
			var b bytes.Buffer
			r.write(&b)
			for _, ch := range cs {
				if ch.OK == slices.Contains(c.failing, ch.Name) {
					t.Errorf("check %q: ok = %v (%s)", ch.Name, ch.OK, ch.Detail)
				}
				if !ch.OK && c.wantText != "" && !strings.Contains(ch.Detail, c.wantText) {
					t.Errorf("detail %q lacks %q", ch.Detail, c.wantText)
				}
				if !ch.OK && !strings.Contains(b.String(), "FAIL  "+ch.Name) {
					t.Errorf("report does not show the failure of %q:\n%s", ch.Name, b.String())
				}
			}
		})
	}
}

func TestLedgerTimelineFoldsRuns(t *testing.T) {
	got := ledgerTimeline(demoFixture().Ledger)
	var lines []string
	for _, e := range got {
		lines = append(lines, e.What)
	}
	want := []string{
		"accepted records 1-3 from w1 (token 5)",
		"accepted records 4-5 from w2 (token 9)",
		"REJECTED write 4 from w1: token 5 is stale, the ledger has seen 9",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
