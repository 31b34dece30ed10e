package election_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
)

func connect() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	return cli
}

func ExampleElection_Campaign() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	e, err := election.New(cli, "scheduler", election.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	term, err := e.Campaign(ctx, "host-a") // returns once really leader
	if err != nil {
		log.Fatal(err)
	}
	leader, _ := e.Leader(ctx)
	fmt.Println("leader:", leader.Value, "token matches:", leader.Token == term.Token())
	_ = term.Proclaim(ctx, "host-a:v2")
	fmt.Println("value:", term.Value())
	_ = term.Resign(ctx) // the next candidate leads at once
	// Output:
	// leader: host-a token matches: true
	// value: host-a:v2
}

func ExampleElection_Run() {
	cli := connect()
	defer cli.Close()

	e, _ := election.New(cli, "cron-runner")
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.Run(ctx, "host-a", func(ctx context.Context, t *election.Term) error {
		// Runs only while leading; ctx ends when leadership may be lost.
		fmt.Println("leading with a token:", t.Token() > 0)
		return nil // returning while leader resigns and ends Run
	})
	fmt.Println("run:", err)
	// Output:
	// leading with a token: true
	// run: <nil>
}

func ExampleElection_Observe() {
	cli := connect()
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	e, _ := election.New(cli, "controller")
	defer e.Close()
	changes := e.Observe(ctx)
	show := func(l election.Leader) {
		if l.IsZero() {
			fmt.Println("no leader")
			return
		}
		fmt.Println("leader:", l.Value)
	}
	show(<-changes) // the current state comes first

	term, _ := e.Campaign(ctx, "host-b")
	show(<-changes)
	_ = term.Resign(ctx)
	show(<-changes)
	// Output:
	// no leader
	// leader: host-b
	// no leader
}
