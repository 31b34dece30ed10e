package robustness

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/history"
)

// eventLog is one watch of every key from revision 1, kept open for the
// whole run: etcd's own account of what was applied, and when this
// process heard of each revision. Compaction faults never compact past
// what it has received (Progress), so nothing is compacted out of its
// view.
type eventLog struct {
	cli    *clientv3.Client
	h      *History // told of every deletion as it arrives
	cancel context.CancelFunc
	done   chan struct{}
	last   atomic.Int64

	mu      sync.Mutex
	events  []history.Event
	seen    []Observed
	err     error
	waitFor int64
	reached chan struct{}
}

const endMarker = "/robustness~end"

func startEventLog(cli *clientv3.Client, h *History) *eventLog {
	ctx, cancel := context.WithCancel(context.Background())
	l := &eventLog{cli: cli, h: h, cancel: cancel, done: make(chan struct{})}
	wch := cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(1), clientv3.WithPrevKV())
	go l.run(wch)
	return l
}

func (l *eventLog) run(wch clientv3.WatchChan) {
	defer close(l.done)
	for wr := range wch {
		at := now()
		if err := wr.Err(); err != nil {
			l.mu.Lock()
			l.err = fmt.Errorf("event watch: %w (compact revision %d)", err, wr.CompactRevision)
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		for _, ev := range wr.Events {
			rev := ev.Kv.ModRevision
			e := history.Event{Rev: rev, Key: string(ev.Kv.Key), Value: string(ev.Kv.Value),
				Create: ev.Kv.CreateRevision, Delete: ev.Type == mvccpb.DELETE}
			if e.Delete && ev.PrevKv != nil {
				e.Create = ev.PrevKv.CreateRevision // which incarnation went
				l.h.deleteSeen(e.Key, e.Create, at)
			}
			l.events = append(l.events, e)
			if n := len(l.seen); n == 0 || l.seen[n-1].Rev < rev {
				l.seen = append(l.seen, Observed{Rev: rev, At: at})
			}
			l.last.Store(rev)
			if l.reached != nil && rev >= l.waitFor {
				close(l.reached)
				l.reached = nil
			}
		}
		l.mu.Unlock()
	}
}

// Progress is the highest revision received so far.
func (l *eventLog) Progress() int64 { return l.last.Load() }

// finish writes an end marker, waits until the watch has delivered it
// (so the log is complete up to the marker), stops the watch and moves
// what it recorded into h.
func (l *eventLog) finish(ctx context.Context, h *History) error {
	defer func() {
		l.cancel()
		<-l.done
	}()
	var resp *clientv3.PutResponse
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err = l.cli.Put(pctx, endMarker, "")
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("event watch: end marker: %w", err)
	}
	reached := make(chan struct{})
	l.mu.Lock()
	if l.last.Load() >= resp.Header.Revision {
		close(reached)
	} else {
		l.waitFor, l.reached = resp.Header.Revision, reached
	}
	werr := l.err
	l.mu.Unlock()
	if werr != nil {
		return werr
	}
	select {
	case <-reached:
	case <-l.done:
		l.mu.Lock()
		werr = l.err
		l.mu.Unlock()
		return fmt.Errorf("event watch ended before the end marker: %v", werr)
	case <-ctx.Done():
		return fmt.Errorf("event watch: end marker at revision %d not delivered: %w", resp.Header.Revision, ctx.Err())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h.End = resp.Header.Revision
	for _, e := range l.events {
		if e.Rev < h.End {
			h.Events = append(h.Events, e)
		}
	}
	for _, s := range l.seen {
		if s.Rev < h.End {
			h.Seen = append(h.Seen, s)
		}
	}
	return nil
}
