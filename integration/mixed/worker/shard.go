//go:build !mixed_noshard

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// shardLane joins group g0 (shardCount shards) as a member for 2 to 6 s,
// leaves, and joins again; a shard it owns is a lock it holds, written to
// while owned, drained 100 to 400 ms after its Context ends.
func (w *worker) shardLane(ctx context.Context, rng *rand.Rand, client string, regID int) {
	for seq := 0; ctx.Err() == nil; seq++ {
		s, err := session.New(w.cli, session.WithTTL(w.cfg.ttl))
		if err != nil {
			pause(ctx, 200*time.Millisecond)
			continue
		}
		g, err := shard.New(w.cli, shardGroup, shardCount, mutex.WithNamespace(w.cfg.ns), mutex.WithSession(s), shard.WithDrainTimeout(time.Second))
		if err != nil {
			w.rep.send(message{T: "op", Op: &op{Client: client, Kind: "shard.New", Call: now(), Return: now(), Err: err.Error()}})
			_ = s.Close()
			pause(ctx, 200*time.Millisecond)
			continue
		}
		member := fmt.Sprintf("%s.%d", client, seq)
		rctx, cancel := context.WithTimeout(ctx, waitFor(rng, 2000, 4000))
		seed, calls := rng.Uint64(), atomic.Uint64{}
		start := now()
		err = g.Run(rctx, member, func(sctx context.Context, sh *shard.Shard) error {
			r := rand.New(rand.NewPCG(seed, calls.Add(1)))
			name := fmt.Sprintf("%s/%05d", shardGroup, sh.ID())
			w.took(member, "shard.Own", "shard", name, now(), sh, nil, false)
			for i := 0; sctx.Err() == nil; i++ {
				w.evidence(member, "shard", name, sh)
				w.guarded(member, regID, "shard", name, sh, fmt.Sprintf("%s.%d.%d", member, sh.Token(), i))
				pause(sctx, waitFor(r, 50, 250))
			}
			time.Sleep(waitFor(r, 100, 300)) // a drain
			return nil
		})
		if errors.Is(err, context.DeadlineExceeded) && rctx.Err() != nil && ctx.Err() == nil {
			err = nil // left the group as planned
		}
		cancel()
		w.rep.send(message{T: "op", Op: &op{Client: member, Kind: "shard.Run", Name: shardGroup, Call: start, Return: now(), Err: errString(err)}})
		_ = g.Close()
		_ = s.Close()
		pause(ctx, waitFor(rng, 0, 300))
	}
}

func lossOf(err error) bool { return errors.Is(err, shard.ErrNotHeld) }
