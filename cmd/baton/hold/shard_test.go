package hold_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/shard"
)

// TestShardRunsACommandPerOwnedShard: baton shard starts one command per
// shard with its number, count and token; on interrupt every command is
// stopped and the member leaves; bad flags are refused before connecting.
func TestShardRunsACommandPerOwnedShard(t *testing.T) {
	ctx := clitest.TestContext(t)
	const ns = "hold-shard"
	dir := t.TempDir()
	rctx, stop := context.WithCancel(ctx)
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	script := `echo "$BATON_SHARD $BATON_SHARD_COUNT $BATON_FENCING_TOKEN" > "` + dir + `/$BATON_SHARD"; exec sleep 60`
	go func() {
		done <- clitest.RunTo(rctx, ns, &out, &errOut, "shard", "work", "--count", "3", "--member", "a", "--drain", "2s", "--", "sh", "-c", script)
	}()
	clitest.WaitFor(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "*"))
		if len(m) != 3 {
			return false
		}
		for _, f := range m {
			if b, _ := os.ReadFile(f); !strings.HasSuffix(string(b), "\n") {
				return false
			}
		}
		return true
	})
	cli := clitest.Srv.Client(t)
	g, err := shard.New(cli, "work", 3, shard.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	owners, err := g.Owners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range owners {
		b, _ := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)))
		if want := strconv.Itoa(i) + " 3 " + o.Token.String(); strings.TrimSpace(string(b)) != want || o.Member != "a" {
			t.Errorf("shard %d: the command saw %q, want %q (owner %q)", i, b, want, o.Member)
		}
	}
	stop()
	if code := <-done; code != cmdutil.ExitOK && code < 128 {
		t.Errorf("interrupted baton shard exited %d\n%s", code, errOut.String())
	}
	if members, _ := g.Members(ctx); len(members) != 0 {
		t.Errorf("members after baton shard ended: %v", members)
	}
	for _, args := range [][]string{
		{"shard", "work", "--count", "0", "--member", "a", "--", "true"},
		{"shard", "work", "--count", "3", "--", "true"},
		{"shard", "work", "--count", "3", "--member", "a"},
		{"shard", "a\x00", "--count", "3", "--member", "a", "--", "true"},
	} {
		if code, _, _ := clitest.Run(ctx, t, ns, args...); code != cmdutil.ExitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, cmdutil.ExitUsage)
		}
	}
}
