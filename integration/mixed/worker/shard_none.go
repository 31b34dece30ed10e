//go:build mixed_noshard

package main

import (
	"context"
	"math/rand/v2"
)

// A build of a commit older than package shard: no shard traffic.
func (w *worker) shardLane(ctx context.Context, _ *rand.Rand, _ string, _ int) { <-ctx.Done() }

func lossOf(error) bool { return false }
