// Package group ends holds of one lease together in one transaction: a
// mutex set's keys, a hold with the keys that must go with it (its
// lock-delay record, an election's candidate record), or an election's
// hand-over (Commit, the one way a transaction that deletes a hold's key
// is sent outside the hold's own release).
package group

import (
	"context"
	"errors"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// Release deletes every hold's key and the keys in also in one transaction
// guarded by every hold's CreateRevision, and ends the holds as released
// (core.Release's result, without a round trip each). When a hold is
// lost already, or the transaction finds a key gone or cannot reach etcd,
// each hold is released on its own (core.Release: a guarded delete, in
// the background if etcd is unreachable) and the keys in also stay: the
// caller's records of an unclean end. notHeld is the primitive's
// ErrNotHeld; the result wraps it for every hold that was lost.
func Release(ctx context.Context, cli *clientv3.Client, holds []*core.Hold, notHeld error, also ...string) error {
	ctx, cancel := retry.ReleaseContext(ctx)
	defer cancel()
	live := true
	for _, h := range holds {
		live = live && h.Context().Err() == nil
	}
	gone := make([]bool, len(holds)) // deleted by this release's transaction
	if live {
		cmps := make([]clientv3.Cmp, len(holds))
		dels := make([]clientv3.Op, 0, len(holds)+len(also))
		for i, h := range holds {
			core.Releasing(h) // its deletion below is no loss
			cmps[i] = h.IsOwner()
			dels = append(dels, clientv3.OpDelete(h.Key()))
		}
		for _, k := range also {
			dels = append(dels, clientv3.OpDelete(k))
		}
		var resp *clientv3.TxnResponse
		unknown := false
		err := retry.Do(ctx, func(actx context.Context) (err error) {
			resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).If(cmps...).Then(dels...).Commit()
			unknown = unknown || err != nil
			return err
		})
		switch {
		case err == nil && resp.Succeeded:
			for i := range gone {
				gone[i] = true
			}
		case err == nil && unknown && !planted.On("x"): // an attempt may have applied unheard: those gone are
			gone = absent(ctx, cli, holds)
		}
	}
	errs := make([]error, len(holds))
	var wg sync.WaitGroup
	for i, h := range holds {
		if gone[i] {
			core.Released(h)
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = core.Release(ctx, h) }() // forgets h; no round trip once released
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil && !errors.Is(err, notHeld) && len(holds) == 1 {
		return errs[0]
	}
	return err
}

// Change is a transaction that deletes the keys of the holds given to
// Commit among its operations. Txn builds each attempt (again after a
// condition failed and Failed asked for it). Failed reads a failed
// condition's answer: applied says an earlier attempt whose reply was lost
// (unheard) applied, again that the transaction is to be built and sent
// once more (at most twice).
type Change struct {
	Txn    func() (cmps []clientv3.Cmp, then, els []clientv3.Op)
	Failed func(resp *clientv3.TxnResponse, unheard bool) (applied, again bool)
}

// Commit ends holds as released, so that their holders know first, then
// sends c, retried through lost replies. When it applied (now, or in an
// attempt whose reply was lost) the holds are finished without a round
// trip each; otherwise each is released on its own (core.Release: a
// guarded delete, in the background while etcd does not answer). It
// returns whether c applied and the last answer (nil on err).
func Commit(ctx context.Context, cli *clientv3.Client, holds []*core.Hold, c Change) (applied bool, resp *clientv3.TxnResponse, err error) {
	ctx, cancel := retry.ReleaseContext(ctx)
	defer cancel()
	for _, h := range holds {
		core.Releasing(h) // the deletion below is no loss
	}
	unheard := false // an attempt failed: it may have applied
	for range 3 {
		cmps, then, els := c.Txn()
		err = retry.Do(ctx, func(actx context.Context) (err error) {
			resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).If(cmps...).Then(then...).Else(els...).Commit()
			unheard = unheard || err != nil
			return err
		})
		if err != nil || resp.Succeeded {
			applied = err == nil
			break
		}
		var again bool
		if applied, again = c.Failed(resp, unheard && !planted.On("y")); applied || !again {
			break
		}
	}
	for _, h := range holds {
		if applied {
			core.Released(h)
		}
		_ = core.Release(ctx, h) // forgets h; no round trip once released
	}
	if err != nil {
		resp = nil
	}
	return applied, resp, err
}

// absent reports which holds' keys are gone (false when unsure).
func absent(ctx context.Context, cli *clientv3.Client, holds []*core.Hold) []bool {
	out := make([]bool, len(holds))
	gets := make([]clientv3.Op, len(holds))
	for i, h := range holds {
		gets[i] = clientv3.OpGet(h.Key(), clientv3.WithKeysOnly())
	}
	var resp *clientv3.TxnResponse
	err := retry.Reads(ctx, func(actx context.Context) (err error) {
		resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).Then(gets...).Commit()
		return err
	})
	if err != nil {
		return out
	}
	for i, r := range resp.Responses {
		out[i] = len(r.GetResponseRange().Kvs) == 0
	}
	return out
}
