package shard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/shard"
)

func connect() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	return cli
}

// Run one member of a group of 8 shards: it owns all of them while alone.
// Each shard's work gets its own Context and fencing token.
func ExampleGroup_Run() {
	cli := connect()
	defer cli.Close()

	g, err := shard.New(cli, "example-ingest", 8, shard.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	started := map[int]bool{}
	err = g.Run(ctx, "host-a", func(ctx context.Context, s *shard.Shard) error {
		mu.Lock()
		started[s.ID()] = true
		if len(started) == s.Count() {
			cancel() // the example's end: every shard started once
		}
		mu.Unlock()
		// Work on shard s.ID() until ctx ends, passing s.Token() to what it
		// writes; context.Cause(ctx) is shard.ErrMoved when the shard goes to
		// another member.
		<-ctx.Done()
		return nil
	})
	fmt.Println("shards run:", len(started), "Run:", errors.Is(err, context.Canceled))
	// Output: shards run: 8 Run: true
}

// Owners and Members show who owns what, for a debug page or a CLI.
func ExampleGroup_Owners() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	g, err := shard.New(cli, "example-owners", 2)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	running := make(chan struct{}, 2)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- g.Run(runCtx, "host-a", func(ctx context.Context, s *shard.Shard) error {
			running <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	<-running
	<-running
	owners, _ := g.Owners(ctx)
	members, _ := g.Members(ctx)
	for _, o := range owners {
		fmt.Println("shard", o.Shard, "owned by", o.Member, "token set:", o.Token > 0)
	}
	fmt.Println("members:", members)
	stop()
	<-done
	// Output:
	// shard 0 owned by host-a token set: true
	// shard 1 owned by host-a token set: true
	// members: [host-a]
}

// Observe follows the group: the current State first, then every change.
func ExampleGroup_Observe() {
	cli := connect()
	defer cli.Close()

	g, err := shard.New(cli, "example-observe", 4)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	states := g.Observe(ctx)
	first := <-states
	fmt.Println("members at first:", len(first.Members))

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- g.Run(runCtx, "host-a", func(ctx context.Context, s *shard.Shard) error { <-ctx.Done(); return nil })
	}()
	for st := range states {
		owned := 0
		for _, o := range st.Owners {
			if o.Member == "host-a" {
				owned++
			}
		}
		if owned == 4 {
			fmt.Println("host-a owns every shard")
			break
		}
	}
	stop()
	<-done
	// Output:
	// members at first: 0
	// host-a owns every shard
}
