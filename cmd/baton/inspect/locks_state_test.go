package inspect_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// TestLocksShowsLockDelayAndReleaseRequest: baton locks lists, in its
// table and its JSON, a running lock-delay with its time left and a
// release request pending to a holder, the requester's text escaped.
func TestLocksShowsLockDelayAndReleaseRequest(t *testing.T) {
	ctx := etcdtest.Context(t, 40*time.Second)
	const ns = "clilocksstate"
	cli := clitest.Srv.Client(t)
	m, err := mutex.New(cli, "held", mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(ctx) }()
	const reason = "deploy \u202e now"
	if err := mutex.RequestRelease(ctx, cli, "held", reason, mutex.WithNamespace(ns), mutex.WithIdentity("op-1")); err != nil {
		t.Fatal(err)
	}
	clitest.LockDelayScene(t, ns, "lost", 4*time.Second)

	code, out, errOut := clitest.Run(ctx, t, ns, "locks")
	if code != 0 {
		t.Fatalf("locks: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `lock-delay on mutex "lost": `) || !strings.Contains(out, " of 4s left (the holder with token ") {
		t.Errorf("no running lock-delay in:\n%s", out)
	}
	if want := `release requested of mutex "held" (token ` + l.Token().String() + `) by "op-1" at `; !strings.Contains(out, want) ||
		!strings.Contains(out, `: "deploy \u202e now"`) || strings.Contains(out, "\u202e") {
		t.Errorf("no escaped release request (%s…) in:\n%s", want, out)
	}

	code, jout, errOut := clitest.Run(ctx, t, ns, "-o", "json", "locks")
	var v struct {
		Locks []struct {
			Name    string `json:"name"`
			Token   int64  `json:"token"`
			Release *struct {
				By     string    `json:"by"`
				Reason string    `json:"reason"`
				At     time.Time `json:"at"`
			} `json:"release_request"`
		} `json:"locks"`
		Delays []struct {
			Kind  string `json:"kind"`
			Name  string `json:"name"`
			Token int64  `json:"lost_token"`
			Delay int64  `json:"delay_seconds"`
			Left  int64  `json:"left_seconds"`
		} `json:"lock_delays"`
	}
	if err := json.Unmarshal([]byte(jout), &v); code != 0 || err != nil {
		t.Fatalf("locks -o json: exit %d, %v: %s%s", code, err, jout, errOut)
	}
	var held bool
	for _, r := range v.Locks {
		if r.Name == "held" {
			held = r.Release != nil && r.Release.By == "op-1" && r.Release.Reason == reason && !r.Release.At.IsZero()
		}
	}
	if !held {
		t.Errorf("held's row has no release request: %s", jout)
	}
	if len(v.Delays) != 1 || v.Delays[0].Kind != "mutex" || v.Delays[0].Name != "lost" || v.Delays[0].Delay != 4 ||
		v.Delays[0].Left <= 0 || v.Delays[0].Left > 4 || v.Delays[0].Token <= 0 {
		t.Errorf("lock_delays %+v: %s", v.Delays, jout)
	}
}
