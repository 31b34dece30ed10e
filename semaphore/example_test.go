package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/semaphore"
)

func connect() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	return cli
}

func ExampleSemaphore_Acquire() {
	cli := connect()
	defer cli.Close()

	s, err := semaphore.New(cli, "exports", 3, semaphore.WithIdentity("exporter-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := s.Acquire(ctx) // ctx bounds the wait only
	if err != nil {
		log.Fatal(err)
	}
	defer p.Release(context.Background())

	// Work under p.Context(): it ends before the lease can expire.
	holders, _ := s.Holders(ctx)
	fmt.Printf("holding 1 of %d permits; holders: %d, first is %s\n", s.Limit(), len(holders), holders[0].Identity)
	// Output: holding 1 of 3 permits; holders: 1, first is exporter-1
}

func ExampleSemaphore_TryAcquire() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	s, _ := semaphore.New(cli, "gpu", 2)
	defer s.Close()
	a, _ := s.TryAcquire(ctx)
	b, _ := s.TryAcquire(ctx)
	_, err := s.TryAcquire(ctx)
	fmt.Println("third:", errors.Is(err, semaphore.ErrNoPermit))
	fmt.Println("tokens increase:", b.Token() > a.Token())
	_ = a.Release(ctx)
	c, err := s.TryAcquire(ctx)
	fmt.Println("after a release:", err == nil)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third: true
	// tokens increase: true
	// after a release: true
}

func ExampleNew_limitMismatch() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	four, _ := semaphore.New(cli, "db-connections", 4)
	defer four.Close()
	p, _ := four.Acquire(ctx) // stores the limit 4
	defer p.Release(ctx)

	eight, _ := semaphore.New(cli, "db-connections", 8)
	defer eight.Close()
	_, err := eight.Acquire(ctx)
	fmt.Println(errors.Is(err, semaphore.ErrLimitMismatch))
	// Output: true
}
