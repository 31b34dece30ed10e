// Package group releases holds of one lease together: a mutex set's keys,
// or a hold with the keys that must go with it (its lock-delay record), in
// one transaction guarded by every hold's key.
package group

import (
	"context"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/retry"
)

// releaseTimeout bounds a release whose caller's ctx has ended, as core's.
const releaseTimeout = 5 * time.Second

// Release deletes every hold's key and the keys in also in one transaction
// guarded by every hold's CreateRevision, and ends the holds as released
// (core.Release's result, without a round trip each). When a hold is
// lost already, or the transaction finds a key gone or cannot reach etcd,
// each hold is released on its own (core.Release: a guarded delete, in
// the background if etcd is unreachable) and the keys in also stay: the
// caller's records of an unclean end. notHeld is the primitive's
// ErrNotHeld; the result wraps it for every hold that was lost.
func Release(ctx context.Context, cli *clientv3.Client, holds []*core.Hold, notHeld error, also ...string) error {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
	}
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
		case err == nil && unknown: // an attempt may have applied unheard: those gone are
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
