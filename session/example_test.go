package session_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// One session, one lease and one renewal per TTL/3, shared by a Mutex and
// an Election.
func Example() {
	srv, err := etcdtest.New(etcdtest.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	cli, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	s, err := session.New(cli, session.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m, _ := mutex.New(cli, "report", mutex.WithSession(s))
	defer m.Close()
	e, _ := election.New(cli, "scheduler", election.WithSession(s))
	defer e.Close()

	lock, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	term, err := e.Campaign(ctx, "host-a")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("one lease:", lock.Lease() == term.Lease())
	_ = term.Resign(ctx)
	_ = lock.Unlock(ctx)

	// A conflicting session-wide setting is refused, naming both values.
	_, err = mutex.New(cli, "other", mutex.WithSession(s), mutex.WithTTL(20*time.Second))
	fmt.Println(err)
	// Output:
	// one lease: true
	// invalid: WithTTL(20s) conflicts with the session's 10s: session-wide settings are set once, on the session
}
