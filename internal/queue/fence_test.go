package queue

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// A plain enqueue's ops are kept for the next of the same key, value and
// lease, and built again once the fence moved (its version is compared) or
// for another key: they never compare a stale version.
func TestPlainEnqueueOpsFollowTheFence(t *testing.T) {
	var f Fence
	fkey := f.Key("/ns/v1/lock/a/", 0x1f)
	if fkey != FenceKey("/ns/v1/lock/a/", 0x1f) || f.Key("/ns/v1/lock/a/", 0x20) != FenceKey("/ns/v1/lock/a/", 0x20) {
		t.Fatal("Fence.Key is not FenceKey")
	}
	fkey = f.Key("/ns/v1/lock/a/", 0x1f)
	version := func(e *enqueued) int64 { return e.cmps[1].GetCompare().GetVersion() }
	a := f.plain(fkey, 0x1f, "/ns/v1/lock/a/1f", "v", "/ns/v1/lock/a/")
	if b := f.plain(fkey, 0x1f, "/ns/v1/lock/a/1f", "v", "/ns/v1/lock/a/"); b != a || version(a) != 0 {
		t.Fatal("the same enqueue's ops were built again")
	}
	if f.Moved(fkey, 0, []*mvccpb.KeyValue{{Version: 3}}, 10); version(f.plain(fkey, 0x1f, "/ns/v1/lock/a/1f", "v", "/ns/v1/lock/a/")) != 3 {
		t.Fatal("kept ops compare a fence version that moved")
	}
	if c := f.plain(fkey, 0x1f, "/ns/v1/lock/a/1f", "w", "/ns/v1/lock/a/"); string(c.then[0].ValueBytes()) != "w" {
		t.Fatal("another value reuses the ops")
	}
	if c := f.plain(fkey, 0x1f, "/ns/v1/lock/b/1f", "w", "/ns/v1/lock/b/"); string(c.cmps[0].KeyBytes()) != "/ns/v1/lock/b/1f" {
		t.Fatal("another key reuses the ops")
	}
}
