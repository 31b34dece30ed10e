package serve

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/telemetry"
)

// requestWatch delivers operators' release requests (`baton unlock
// --request`, internal/request) to this server's holds: one etcd watch of
// a namespace's request prefix while holds of it are open, instead of the
// library's read, watch and goroutine per hold. A request is put after its
// holder's key exists, so it is seen by the namespace's watch (or its
// first read) whether its hold registered yet or not; one for no
// registered hold is kept, up to maxUnclaimed, until a hold claims it or
// its key goes.
type requestWatch struct {
	cli  *clientv3.Client
	log  *zap.Logger
	stop context.Context // the server's: every watch ends with it
	// linger is how long a namespace's watch outlives its last hold: a
	// namespace held in turns keeps one watch.
	linger time.Duration
	// seen, when set (tests), is called once a namespace's watch applied
	// the requests up to revision rev, and with -1 once it ended refused.
	seen func(ns string, rev int64)

	mu   sync.Mutex
	byNS map[string]*nsRequests
	wg   sync.WaitGroup
}

// maxUnclaimed bounds the requests a namespace keeps for no hold of this
// server (a library holder's, or one whose hold has not registered yet).
const maxUnclaimed = 1024

type nsRequests struct {
	holds     map[string]*requestBox // request key → the hold it is for
	unclaimed map[string]unclaimed
	order     []string // unclaimed keys, oldest first (some may be gone)
	n         int      // holds following
	cancel    context.CancelFunc
	idle      *time.Timer
}

type unclaimed struct {
	r   request.Request
	rev int64
}

type requestBox struct {
	ch   chan request.Request
	ctx  context.Context // the hold's: its span records the request
	last int64           // the ModRevision last delivered
}

func newRequestWatch(cli *clientv3.Client, log *zap.Logger, stop context.Context) *requestWatch {
	return &requestWatch{cli: cli, log: log, stop: stop, linger: time.Minute, byNS: make(map[string]*nsRequests)}
}

// follow delivers the requests put at reqKeys (request.KeyOf of a hold's
// keys and token) on the returned channel, which holds one: a holder only
// needs to know one is pending. stop ends it.
func (w *requestWatch) follow(ctx context.Context, ns string, reqKeys []string) (<-chan request.Request, func()) {
	box := &requestBox{ch: make(chan request.Request, 1), ctx: ctx}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byNS[ns]
	joined := n != nil
	if n == nil {
		n = &nsRequests{holds: make(map[string]*requestBox), unclaimed: make(map[string]unclaimed)}
		w.byNS[ns] = n
		wctx, cancel := context.WithCancel(w.stop)
		n.cancel = cancel
		w.wg.Add(1)
		go w.run(wctx, ns, n)
	}
	if n.idle != nil {
		n.idle.Stop()
		n.idle = nil
	}
	n.n++
	if joined && planted.On("r") {
		reqKeys = nil // planted bug r: a hold joining a running watch is not registered
	}
	for _, k := range reqKeys {
		n.holds[k] = box
		if u, ok := n.unclaimed[k]; ok {
			delete(n.unclaimed, k)
			box.deliver(u.r, u.rev)
		}
	}
	return box.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, k := range reqKeys {
			if n.holds[k] == box {
				delete(n.holds, k)
			}
		}
		if n.n--; n.n == 0 {
			n.idle = time.AfterFunc(w.linger, func() { w.retire(ns, n) })
		}
	}
}

// retire ends a namespace's watch that no hold followed for linger.
func (w *requestWatch) retire(ns string, n *nsRequests) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n.n > 0 || w.byNS[ns] != n {
		return
	}
	delete(w.byNS, ns)
	n.cancel()
}

// wait waits for every namespace's watch to end (after the server's stop).
func (w *requestWatch) wait() {
	w.mu.Lock()
	for _, n := range w.byNS {
		if n.idle != nil {
			n.idle.Stop()
		}
		n.cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

func (b *requestBox) deliver(r request.Request, rev int64) {
	if rev <= b.last {
		return // read again after a broken watch
	}
	b.last = rev
	telemetry.HoldFrom(b.ctx).ReleaseRequested(r.By)
	select {
	case b.ch <- r:
	default:
	}
}

// run reads the namespace's requests, then watches them, again after a
// broken watch, until ctx ends.
func (w *requestWatch) run(ctx context.Context, ns string, n *nsRequests) {
	defer w.wg.Done()
	prefix := keys.KindPrefix(ns, request.Release)
	pause := 50 * time.Millisecond
	for ctx.Err() == nil {
		var g *clientv3.GetResponse
		err := retry.Reads(ctx, func(actx context.Context) (err error) {
			g, err = w.cli.Get(clientv3.WithRequireLeader(actx), prefix, clientv3.WithPrefix())
			return err
		})
		if err != nil {
			if retry.Permanent(err) {
				// As the library's read of a hold's own requests: the holds
				// that follow now get none; the next hold of the namespace
				// starts a watch of its own, with its own first read.
				w.log.Warn("release requests are not delivered: their keys cannot be read", zap.String("namespace", ns), zap.Error(err))
				w.mu.Lock()
				if w.byNS[ns] == n {
					delete(w.byNS, ns)
					if n.idle != nil {
						n.idle.Stop()
					}
				}
				w.mu.Unlock()
				n.cancel()
				w.applied(ns, -1)
				return
			}
			continue
		}
		w.reset(n, g.Kvs)
		w.applied(ns, g.Header.Revision)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		began := time.Now()
		for wr := range w.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(g.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			w.apply(n, wr.Events)
			w.applied(ns, wr.Header.Revision)
		}
		cancel()
		if time.Since(began) > 2*time.Second {
			pause = 50 * time.Millisecond
		}
		_ = retry.Sleep(ctx, pause)
		pause = min(2*pause, 2*time.Second)
	}
}

func (w *requestWatch) applied(ns string, rev int64) {
	if w.seen != nil {
		w.seen(ns, rev)
	}
}

// reset applies a read of every request: the ones for registered holds
// are delivered (unless delivered before), the rest kept as unclaimed.
func (w *requestWatch) reset(n *nsRequests, kvs []*mvccpb.KeyValue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n.unclaimed, n.order = make(map[string]unclaimed), nil
	for _, kv := range kvs {
		w.put(n, string(kv.Key), kv.Value, kv.ModRevision)
	}
}

func (w *requestWatch) apply(n *nsRequests, evs []*clientv3.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		if ev.Type == clientv3.EventTypeDelete {
			delete(n.unclaimed, k)
			continue
		}
		w.put(n, k, ev.Kv.Value, ev.Kv.ModRevision)
	}
}

// put delivers a request, or keeps it for a hold yet to register. Called
// with w.mu held.
func (w *requestWatch) put(n *nsRequests, k string, v []byte, rev int64) {
	var r request.Request
	if json.Unmarshal(v, &r) != nil {
		return
	}
	if box := n.holds[k]; box != nil {
		box.deliver(r, rev)
		return
	}
	if _, ok := n.unclaimed[k]; !ok {
		n.order = append(n.order, k)
	}
	n.unclaimed[k] = unclaimed{r: r, rev: rev}
	for len(n.unclaimed) > maxUnclaimed {
		old := n.order[0]
		n.order = n.order[1:]
		delete(n.unclaimed, old)
	}
	if len(n.order) > 2*maxUnclaimed { // drop the keys already gone
		live := n.order[:0]
		for _, o := range n.order {
			if _, ok := n.unclaimed[o]; ok {
				live = append(live, o)
			}
		}
		n.order = live
	}
}
