package inspect_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/inspect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/shard"
)

// TestShardsShowsOwnersAndMembers: baton shards lists each shard's owner
// and token as the library sees them, --members the counts, -o json both;
// a bad group name is refused before connecting.
func TestShardsShowsOwnersAndMembers(t *testing.T) {
	ctx := clitest.TestContext(t)
	const ns = "inspect-shards"
	cli := clitest.Srv.Client(t)
	g, err := shard.New(cli, "ingest\u00e9", 4, shard.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	started := make(chan struct{}, 4)
	go func() {
		done <- g.Run(rctx, "host-a", func(ctx context.Context, s *shard.Shard) error {
			started <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	defer func() { stop(); <-done }()
	for range 4 {
		<-started
	}
	owners, err := g.Owners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := clitest.Run(ctx, t, ns, "shards", "ingest\u00e9", "-o", "json")
	var v inspect.ShardsJSON
	if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("shards -o json: code %d\n%s", code, out)
	}
	if v.Count != 4 || v.Unowned != 0 || len(v.Members) != 1 || v.Members[0].Owns != 4 || len(v.Owners) != 4 {
		t.Fatalf("shards -o json: %+v", v)
	}
	for i, o := range v.Owners {
		if o != owners[i] {
			t.Errorf("shard %d: the CLI shows %+v, the library %+v", i, o, owners[i])
		}
	}
	code, out, _ = clitest.Run(ctx, t, ns, "shards", "ingest\u00e9")
	if code != cmdutil.ExitOK || !strings.Contains(out, owners[3].Token.String()) || strings.Count(out, "host-a") != 4 {
		t.Errorf("shards: code %d\n%s", code, out)
	}
	code, out, _ = clitest.Run(ctx, t, ns, "shards", "ingest\u00e9", "--members")
	if code != cmdutil.ExitOK || !strings.Contains(out, "host-a") || !strings.Contains(out, "(unowned)") {
		t.Errorf("shards --members: code %d\n%s", code, out)
	}
	if code, _, _ := clitest.Run(ctx, t, ns, "shards", "a\x00b"); code != cmdutil.ExitUsage {
		t.Errorf("shards with a control character: code %d, want %d", code, cmdutil.ExitUsage)
	}
}
