package inspect_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/inspect"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
)

// TestLocksShowsAHolderWhoseKeyFormItDoesNotWrite: a newer release may put
// keys of a form this build does not write under a lock's name (as mutex
// Sets' ".s<n>" keys were to builds before them, which then listed no
// holder at all, or the waiter behind as the holder). Every contender
// orders such a key by its revision like any other, so baton locks shows
// it as the holder it is, counts the waiter behind it, and says that it
// cannot read the key's form.
func TestLocksShowsAHolderWhoseKeyFormItDoesNotWrite(t *testing.T) {
	ctx := clitest.TestContext(t)
	const ns = "unread"
	cli := clitest.Srv.Client(t)
	var keys []string
	for _, seg := range []string{"%x.z7", "%x"} { // a future tag first, then a plain lease key
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("/%s/v1/lock/jobs/"+seg, ns, int64(l.ID))
		if _, err := cli.Put(ctx, key, "host:1", clientv3.WithLease(l.ID)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	code, out, errOut := clitest.Run(ctx, t, ns, "-o", "json", "locks")
	if code != cmdutil.ExitOK {
		t.Fatalf("locks: exit %d: %s", code, errOut)
	}
	var v struct {
		Locks []inspect.LockJSON `json:"locks"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Locks) != 1 || v.Locks[0].Key != keys[0] || v.Locks[0].Waiters != 1 || !v.Locks[0].Unread {
		t.Fatalf("locks -o json = %s; want jobs held by %s (unread_key), 1 waiter", out, keys[0])
	}
	code, out, errOut = clitest.Run(ctx, t, ns, "locks")
	if code != cmdutil.ExitOK || !strings.Contains(out, keys[0]) || !strings.Contains(out, "does not write") {
		t.Fatalf("locks: exit %d\n%s%s\nwant the holder %s and a line saying its form is not this build's", code, out, errOut, keys[0])
	}
	t.Logf("baton locks:\n%s", out)
}
