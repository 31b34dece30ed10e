package election_test

import (
	"context"
	"errors"
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

func ExampleTerm_Transfer() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	a, _ := election.New(cli, "ingest", election.WithStrategy(election.Preferred))
	defer a.Close()
	b, _ := election.New(cli, "ingest", election.WithStrategy(election.Preferred))
	defer b.Close()

	term, _ := a.Campaign(ctx, "host-a")
	won := make(chan *election.Term)
	go func() {
		t, _ := b.Campaign(ctx, "host-b") // waits: host-a leads
		won <- t
	}()
	var to string
	for to == "" { // until host-b's record shows
		time.Sleep(10 * time.Millisecond)
		cands, _ := a.Candidates(ctx)
		for _, c := range cands {
			if c.Value == "host-b" {
				to = c.Key
			}
		}
	}
	// One transaction: host-a's key goes, host-b's comes; nobody else can
	// lead in between and the election is never without a leader.
	if err := term.Transfer(ctx, to); err != nil {
		log.Fatal(err)
	}
	next := <-won
	fmt.Println("old term ended:", errors.Is(context.Cause(term.Context()), election.ErrTransferred))
	fmt.Println("leader:", next.Value(), "token greater:", next.Token() > term.Token())
	_ = next.Resign(ctx)
	// Output:
	// old term ended: true
	// leader: host-b token greater: true
}

// Under the default strategy, a rolling upgrade hands leadership past the
// next candidate (an old version, a replica being drained) to the one it
// names; the candidate skipped waits on, behind the new leader.
func ExampleTerm_Transfer_pastTheNext() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	var els []*election.Election
	for range 3 {
		e, _ := election.New(cli, "upgrade")
		defer e.Close()
		els = append(els, e)
	}
	term, _ := els[0].Campaign(ctx, "v1-host-a")
	won := make(chan *election.Term, 2)
	keyOf := func(value string) string { // waits until value is a candidate
		for {
			cands, _ := els[0].Candidates(ctx)
			for _, c := range cands {
				if c.Value == value {
					return c.Key
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i, v := range []string{"v1-host-b", "v2-host-c"} {
		go func() { t, _ := els[i+1].Campaign(ctx, v); won <- t }()
		keyOf(v)
	}
	if err := term.Transfer(ctx, keyOf("v2-host-c")); err != nil {
		log.Fatal(err)
	}
	next := <-won
	fmt.Println("leader:", next.Value())
	_ = next.Resign(ctx)
	after := <-won
	fmt.Println("then:", after.Value(), "token greater:", after.Token() > next.Token())
	_ = after.Resign(ctx)
	// Output:
	// leader: v2-host-c
	// then: v1-host-b token greater: true
}

func ExampleWithStrategy() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	// A rolling upgrade: the v1 replica leads; a v2 replica joining waits,
	// since the oldest version leads while versions are mixed.
	v1, _ := election.New(cli, "scheduler-pool", election.WithStrategy(election.Preferred), election.WithVersion("v1.4.2"))
	defer v1.Close()
	v2, _ := election.New(cli, "scheduler-pool", election.WithStrategy(election.Preferred), election.WithVersion("v1.5.0"))
	defer v2.Close()

	term, _ := v1.Campaign(ctx, "replica-1")
	won := make(chan *election.Term)
	go func() {
		t, _ := v2.Campaign(ctx, "replica-2")
		won <- t
	}()
	for ; ; time.Sleep(10 * time.Millisecond) {
		if cands, _ := v1.Candidates(ctx); len(cands) == 2 {
			for _, c := range cands {
				fmt.Println(c.Value, c.Version, c.Strategy, "leader:", c.Leader)
			}
			break
		}
	}
	// Shutting down the v1 replica hands over to the best candidate left.
	_ = term.Resign(ctx)
	next := <-won
	fmt.Println("leader:", next.Value())
	_ = next.Resign(ctx)
	// Output:
	// replica-1 v1.4.2 preferred leader: true
	// replica-2 v1.5.0 preferred leader: false
	// leader: replica-2
}
