package election

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/retry"
)

// Requests to end a term: an operator's or a better candidate's, and the
// leader's watch of them.

// RequestEnd asks the leader to end its term and hand over to the
// candidate whose key is to (empty, under Preferred only: the best one),
// as a better candidate does: the leader's Term.EndRequested closes, and
// Run hands over at once (with Transfer) once fn returns. by names the requester in Term.EndRequest. The request
// lives on a lease of its own granted for within (at least 2 s), so it
// vanishes if the leader ignores it. It returns the leader asked;
// ErrNoLeader when nobody leads, an error wrapping ErrStrategy for an
// empty to under Oldest (there is no best candidate to choose), and
// PrepareHandOver's errors for to.
func (e *Election) RequestEnd(ctx context.Context, to, by string, within time.Duration) (Candidate, error) {
	if within < 2*time.Second {
		return Candidate{}, fmt.Errorf("%w: RequestEnd: within %v: must be at least 2s (etcd's shortest lease)", ErrInvalid, within)
	}
	h, err := e.leaderOnly(ctx)
	if err != nil {
		return Candidate{}, err
	}
	if h.From.Strategy != Preferred && to == "" {
		return h.From, fmt.Errorf("%w: %w: election %q uses the oldest strategy: its leader takes requests to hand over to a named candidate only", ErrInvalid, ErrStrategy, e.Name())
	}
	if to != "" {
		if h, err = e.PrepareHandOver(ctx, to); err != nil {
			return Candidate{}, err
		}
	}
	cli := e.o.Client()
	g, err := cli.Grant(ctx, int64((within+time.Second-1)/time.Second))
	if err != nil {
		return h.From, err
	}
	b, _ := json.Marshal(EndRequest{By: by, To: to, Deadline: within.String()})
	key := e.endKey(h.From.LeaseID)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.From.Key), "=", int64(h.From.Token)),
			clientv3.Compare(clientv3.ModRevision(key), "<", int64(h.From.Token))).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(g.ID))).Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("the leader changed, or was already asked to end its term")
	}
	if err != nil {
		_, _ = cli.Revoke(context.WithoutCancel(ctx), g.ID)
	}
	return h.From, err
}

// leaderOnly is PrepareHandOver's From without a target.
func (e *Election) leaderOnly(ctx context.Context) (HandOver, error) {
	st, err := e.readState(ctx)
	if err != nil {
		return HandOver{}, err
	}
	from, ok := st.leaderCandidate()
	if !ok {
		return HandOver{}, ErrNoLeader
	}
	return HandOver{From: from}, nil
}

// watchEnd closes the Term's EndRequested on a request newer than the
// term; it runs until the term ends.
func (t *Term) watchEnd(ctx context.Context) {
	cli := t.e.o.Client()
	key := t.e.endKey(t.Lease())
	check := func(kv *mvccpb.KeyValue) bool {
		if kv.ModRevision <= int64(t.Token()) {
			return false // asked of an earlier term on this lease
		}
		var r EndRequest
		if json.Unmarshal(kv.Value, &r) != nil {
			r = EndRequest{By: "unreadable request " + string(kv.Key)}
		}
		t.requested(r)
		return true
	}
	for ctx.Err() == nil {
		// Watch from the current revision first, then read: a watch that
		// starts in the past is served in batches every 100 ms.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cli.Watch(wctx, key, clientv3.WithCreatedNotify(), clientv3.WithFilterDelete())
		wr, ok := <-wch
		var resp *clientv3.GetResponse
		err := ctx.Err()
		switch {
		case err != nil:
		case !ok || wr.Err() != nil:
			err = errWatchBroken
			if ok && retry.Permanent(wr.Err()) {
				cancel()
				return
			}
		default:
			resp, err = cli.Get(clientv3.WithRequireLeader(ctx), key)
		}
		if err == nil && len(resp.Kvs) > 0 && check(resp.Kvs[0]) {
			cancel()
			return
		}
		if err != nil {
			cancel() // ends the range below at once
		}
		for wr := range wch {
			if err != nil || wr.Err() != nil {
				break // err: read again after the pause below
			}
			for _, ev := range wr.Events {
				if check(ev.Kv) {
					cancel()
					return
				}
			}
		}
		cancel()
		if err != nil && retry.Permanent(err) || retry.Sleep(ctx, 50*time.Millisecond) != nil {
			return
		}
	}
}
