package hold_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// TestLockSeveralNamesGivesTheCommandOneToken: baton lock A B C -- CMD
// runs CMD with one token, every name and key, while the three locks are
// held (a plain TryLock of each fails), and releases them all after.
func TestLockSeveralNamesGivesTheCommandOneToken(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	const ns = "clilockset"
	code, out, errOut := clitest.Run(ctx, t, ns, "lock", "set-a", "set/b", "set c", "--", "sh", "-c",
		`printf '%s\n' "$BATON_FENCING_TOKEN" "$BATON_LOCK_NAMES" "$BATON_LOCK_KEYS"`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 {
		t.Fatalf("child printed %q", out)
	}
	if strings.Join(lines[1:4], "|") != "set-a|set/b|set c" {
		t.Fatalf("names %q", lines[1:4])
	}
	for i, name := range []string{"set-a", "set%2Fb", "set c"} {
		if !strings.HasPrefix(lines[4+i], "/"+ns+"/v1/lock/"+name+"/") {
			t.Fatalf("key %d %q is not in the queue of %q", i, lines[4+i], name)
		}
	}
	for _, name := range []string{"set-a", "set/b", "set c"} {
		m, err := mutex.New(clitest.Srv.Client(t), name, mutex.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Fatalf("%q not released after the command: %v", name, err)
		}
		_ = l.Unlock(ctx)
		_ = m.Close()
	}
}

// TestLockSetWaitsForAPlainHolderAndLocksShowsTheSet: a set waits for a
// plain holder of one member; baton locks then lists the members as one
// set with one token; --try on a held member exits 75 naming it.
func TestLockSetWaitsForAPlainHolderAndLocksShowsTheSet(t *testing.T) {
	ctx := etcdtest.Context(t, 40*time.Second)
	const ns = "clilockset2"
	m, err := mutex.New(clitest.Srv.Client(t), "b", mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pl, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := clitest.Run(ctx, t, ns, "lock", "--try", "a", "b", "--", "true"); code != cmdutil.ExitNotAcquired || !strings.Contains(errOut, `"b" (holder`) {
		t.Fatalf("--try with b held: exit %d, %s", code, errOut)
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- clitest.RunTo(hctx, ns, &out, &errOut, "-o", "json", "lock", "a", "b", "c", "--") }()
	time.Sleep(300 * time.Millisecond)
	if strings.Contains(errOut.String(), `"acquired"`) {
		t.Fatalf("acquired while b was held: %s", errOut.String())
	}
	if err := pl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errOut.String(), `"acquired"`) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var held struct {
		Names []string `json:"names"`
		Token int64    `json:"token"`
	}
	for _, line := range strings.Split(errOut.String(), "\n") {
		if strings.Contains(line, `"acquired"`) {
			_ = json.Unmarshal([]byte(line), &held)
		}
	}
	if len(held.Names) != 3 || held.Token <= int64(pl.Token()) {
		t.Fatalf("acquired view %+v (stderr %s)", held, errOut.String())
	}
	code, lout, lerr := clitest.Run(ctx, t, ns, "locks")
	if code != 0 || !strings.Contains(lout, "holds 3 locks as one set: \"a\", \"b\", \"c\"") {
		t.Fatalf("locks: exit %d\n%s%s", code, lout, lerr)
	}
	code, jout, _ := clitest.Run(ctx, t, ns, "-o", "json", "locks")
	var list struct {
		Locks []struct {
			Name  string   `json:"name"`
			Token int64    `json:"token"`
			Set   []string `json:"set"`
		} `json:"locks"`
	}
	if err := json.Unmarshal([]byte(jout), &list); code != 0 || err != nil || len(list.Locks) != 3 {
		t.Fatalf("locks -o json: %d %v %s", code, err, jout)
	}
	for _, l := range list.Locks {
		if l.Token != held.Token || len(l.Set) != 3 {
			t.Fatalf("row %+v; want token %d and the set's three names", l, held.Token)
		}
	}
	cancel()
	if code := <-done; code != 130 && code != 0 {
		t.Logf("lock ended with %d: %s", code, errOut.String())
	}
}

func TestLockSetUsageErrors(t *testing.T) {
	ctx := etcdtest.Context(t, 10*time.Second)
	for _, args := range [][]string{
		{"lock", "a", "a", "--", "true"},
		{"lock", "a", "b", "--limit", "2", "--", "true"},
		{"lock", "a", "sleep", "1"},
	} {
		if code, _, errOut := clitest.Run(ctx, t, "clilockset3", args...); code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d (%s); want %d", args, code, errOut, cmdutil.ExitUsage)
		}
	}
}
