package inspect_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/keyspace"
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
	out0 := out
	var v keyspace.ShardsJSON
	if code != cmdutil.ExitOK || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("shards -o json: code %d\n%s", code, out)
	}
	if v.Count != 4 || v.Unowned != 0 || len(v.Members) != 1 || v.Members[0].Owns != 4 || len(v.Owners) != 4 {
		t.Fatalf("shards -o json: %+v", v)
	}
	for i, o := range v.Owners {
		if o.Owner != owners[i] {
			t.Errorf("shard %d: the CLI shows %+v, the library %+v", i, o, owners[i])
		}
	}
	code, out, _ = clitest.Run(ctx, t, ns, "shards", "ingest\u00e9")
	if code != cmdutil.ExitOK || !strings.Contains(out, owners[3].Token.String()) || strings.Count(out, "host-a") != 4 {
		t.Errorf("shards: code %d\n%s", code, out)
	}
	code, wout, _ := clitest.Run(ctx, t, ns, "shards", "ingest\u00e9", "-w", "json")
	if code != cmdutil.ExitOK || wout != out0 {
		t.Errorf("shards -w json (etcdctl's spelling of -o): code %d\n%s\nwant\n%s", code, wout, out0)
	}
	code, out, _ = clitest.Run(ctx, t, ns, "shards", "ingest\u00e9", "--members")
	if code != cmdutil.ExitOK || !strings.Contains(out, "host-a") || !strings.Contains(out, "(unowned)") {
		t.Errorf("shards --members: code %d\n%s", code, out)
	}
	if code, _, _ := clitest.Run(ctx, t, ns, "shards", "a\x00b"); code != cmdutil.ExitUsage {
		t.Errorf("shards with a control character: code %d, want %d", code, cmdutil.ExitUsage)
	}
}

// TestShardsShowsHeldFor: a shard that baton shard owns has a "held for"
// from its acquisition record, in the table and in -o json; a shard whose
// owner uses the library directly shows "unknown"; the member's name,
// untrusted text, is escaped.
func TestShardsShowsHeldFor(t *testing.T) {
	ctx := clitest.TestContext(t)
	const ns = "inspect-shards-held"
	const member = "cli\u202eevil"
	rctx, stop := context.WithCancel(ctx)
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- clitest.RunTo(rctx, ns, &out, &errOut, "shard", "held", "--count", "2", "--member", member, "--drain", "2s", "--", "sleep", "60")
	}()
	defer func() { stop(); <-done }()
	cli := clitest.Srv.Client(t)
	g, err := shard.New(cli, "held", 2, shard.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var v keyspace.ShardsJSON
	clitest.WaitFor(t, func() bool {
		code, out, _ := clitest.Run(ctx, t, ns, "shards", "held", "-o", "json")
		return code == cmdutil.ExitOK && json.Unmarshal([]byte(out), &v) == nil && len(v.Owners) == 2 &&
			v.Owners[0].HeldSince != nil && v.Owners[1].HeldSince != nil
	})
	before := time.Now()
	for _, o := range v.Owners {
		if o.Member != member || o.HeldFor == nil || *o.HeldFor < 0 || o.HeldSince.After(before) {
			t.Errorf("shard %d: %+v; want owner %q held since before %v", o.Shard, o, member, before)
		}
	}
	// A library member joins: one shard moves to it, and it records nothing.
	started := make(chan int, 2)
	gdone := make(chan error, 1)
	gctx, gstop := context.WithCancel(ctx)
	go func() {
		gdone <- g.Run(gctx, "lib", func(ctx context.Context, s *shard.Shard) error {
			started <- s.ID()
			<-ctx.Done()
			return nil
		})
	}()
	defer func() { gstop(); <-gdone }()
	lib := <-started
	code, text, _ := clitest.Run(ctx, t, ns, "shards", "held")
	if code != cmdutil.ExitOK || !strings.Contains(text, "HELD FOR") || strings.Contains(text, "\u202e") {
		t.Fatalf("shards: code %d\n%s", code, text)
	}
	var libRow, cliRow string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, strconv.Itoa(lib)+" "):
			libRow = line
		case strings.HasPrefix(line, strconv.Itoa(1-lib)+" "):
			cliRow = line
		}
	}
	if !strings.Contains(libRow, "lib") || !strings.Contains(libRow, "unknown") {
		t.Errorf("the library's shard %d: %q; want owner lib, held for unknown", lib, libRow)
	}
	if !strings.Contains(cliRow, `"cli\u202eevil"`) || strings.Contains(cliRow, "unknown") {
		t.Errorf("baton shard's shard %d: %q; want the escaped member and a held for", 1-lib, cliRow)
	}
}
