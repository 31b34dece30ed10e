// Package history records what etcd applied under a prefix and checks it
// against the rule of a lock primitive, for tests that must judge safety
// from etcd's own history rather than from what clients believed.
//
// A test's holders make a fenced write (guarded by their key, as
// Permit.Txn and Lock.Txn do) to a work prefix while they hold, with
// their contender key as the value. Each such write is etcd's evidence
// that the key acted as a holder at that revision. Check replays the
// contenders' puts and deletes with those writes in revision order and
// reports every write made by a key the rule did not allow to hold then,
// and every revision at which the keys that acted together break the
// rule.
package history

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event is one put or delete applied by etcd.
type Event struct {
	Rev    int64
	Key    string
	Value  string
	Create int64 // CreateRevision of a put
	Delete bool
}

// Record returns every event under prefix from revision from on, up to and
// including a marker put it makes under prefix at the end, so the history
// is complete up to the moment Record was called. It reads etcd's MVCC
// history, so nothing must compact it meanwhile.
func Record(ctx context.Context, cli *clientv3.Client, prefix string, from int64) ([]Event, error) {
	marker := prefix + "~history-end"
	put, err := cli.Put(ctx, marker, "")
	if err != nil {
		return nil, err
	}
	end := put.Header.Revision
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []Event
	for wr := range cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			return nil, err
		}
		for _, ev := range wr.Events {
			e := Event{Rev: ev.Kv.ModRevision, Key: string(ev.Kv.Key), Value: string(ev.Kv.Value),
				Create: ev.Kv.CreateRevision, Delete: ev.Type == mvccpb.DELETE}
			if e.Rev >= end {
				return out, nil
			}
			out = append(out, e)
		}
	}
	return nil, fmt.Errorf("history: watch ended before revision %d: %w", end, ctx.Err())
}

// Entry is a live contender key.
type Entry struct {
	Key    string
	Create int64
}

// Rule is what a primitive allows.
type Rule interface {
	// MayHold reports whether live[i] may hold while live (every contender
	// key present, oldest first) exists.
	MayHold(live []Entry, i int) bool
	// Together reports whether the keys that acted (oldest first) may hold
	// at the same revision.
	Together(acting []Entry) bool
}

// Report is the outcome of Check.
type Report struct {
	// Violations, in revision order; empty when the history obeys the rule.
	Violations []string
	// Writes is the number of fenced writes checked; Grants the number of
	// keys that became allowed to hold.
	Writes, Grants int
	// MaxTogether is the largest number of keys that acted and still
	// existed at one revision.
	MaxTogether int
}

// Check replays events: puts and deletes under contenders are the queue,
// puts under work are fenced writes whose value is the writer's key. It
// also checks that keys were allowed to hold in token order: a key that
// became allowed later than another has a higher CreateRevision, unless
// both became allowed at the same revision.
func Check(events []Event, contenders, work string, rule Rule) Report {
	var r Report
	live := []Entry{}
	acting := map[string]bool{}
	granted := map[string]int64{} // key → revision it became allowed to hold
	type grant struct{ rev, create int64 }
	var grants []grant
	bad := func(format string, args ...any) {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
	index := func(key string) int {
		for i, e := range live {
			if e.Key == key {
				return i
			}
		}
		return -1
	}
	for _, ev := range events {
		switch {
		case strings.HasPrefix(ev.Key, contenders) && ev.Delete:
			if i := index(ev.Key); i >= 0 {
				live = append(live[:i], live[i+1:]...)
			}
			delete(acting, ev.Key)
		case strings.HasPrefix(ev.Key, contenders):
			if index(ev.Key) < 0 {
				live = append(live, Entry{Key: ev.Key, Create: ev.Create})
				sort.Slice(live, func(a, b int) bool { return live[a].Create < live[b].Create })
			}
		case strings.HasPrefix(ev.Key, work) && !ev.Delete:
			r.Writes++
			i := index(ev.Value)
			if i < 0 {
				bad("rev %d: fenced write by %s, whose key does not exist", ev.Rev, ev.Value)
				continue
			}
			if !rule.MayHold(live, i) {
				bad("rev %d: %s wrote while not allowed to hold (position %d of %v)", ev.Rev, ev.Value, i, keysOf(live))
			}
			acting[ev.Value] = true
			var together []Entry
			for _, e := range live {
				if acting[e.Key] {
					together = append(together, e)
				}
			}
			r.MaxTogether = max(r.MaxTogether, len(together))
			if !rule.Together(together) {
				bad("rev %d: held together against the rule: %v", ev.Rev, keysOf(together))
			}
		}
		for i, e := range live {
			if _, ok := granted[e.Key]; !ok && rule.MayHold(live, i) {
				granted[e.Key] = ev.Rev
				grants = append(grants, grant{ev.Rev, e.Create})
			}
		}
	}
	r.Grants = len(grants)
	for i := 1; i < len(grants); i++ {
		if a, b := grants[i-1], grants[i]; a.rev < b.rev && b.create < a.create {
			bad("token %d allowed at rev %d, after token %d at rev %d: not in token order", b.create, b.rev, a.create, a.rev)
		}
	}
	return r
}

func keysOf(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key[strings.LastIndexByte(e.Key, '/')+1:]
	}
	return out
}

// Semaphore is the rule of a semaphore of Limit permits in arrival order.
type Semaphore struct{ Limit int }

// MayHold: fewer than Limit older keys exist.
func (s Semaphore) MayHold(_ []Entry, i int) bool { return i < s.Limit }

// Together: at most Limit.
func (s Semaphore) Together(acting []Entry) bool { return len(acting) <= s.Limit }

// RWMutex is the rule of a read/write lock whose keys' tag (IsReader)
// tells readers from writers.
type RWMutex struct{ IsReader func(key string) bool }

// MayHold: a writer when it is the oldest, a reader when no older writer
// exists.
func (rw RWMutex) MayHold(live []Entry, i int) bool {
	if !rw.IsReader(live[i].Key) {
		return i == 0
	}
	for _, e := range live[:i] {
		if !rw.IsReader(e.Key) {
			return false
		}
	}
	return true
}

// Together: readers only, or one writer alone.
func (rw RWMutex) Together(acting []Entry) bool {
	for _, e := range acting {
		if !rw.IsReader(e.Key) && len(acting) > 1 {
			return false
		}
	}
	return true
}
