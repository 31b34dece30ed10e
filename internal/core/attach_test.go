package core

import (
	"sync"
	"testing"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// Concurrent Attach and Detach of one etcd session, with a use that
// closes its Session meanwhile, leave no registry entry once every use
// detached, and a Session that a later Attach gets is never a closed one.
func TestAttachDetachRaceLeavesNoEntryAndNoClosedSession(t *testing.T) {
	cli := srv.Client(t)
	cs, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				s, _ := Attach(cs, Config{})
				s.mu.Lock()
				closed := s.closed
				s.mu.Unlock()
				if closed {
					t.Error("Attach returned a closed Session")
				}
				if err := s.Detach(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	attached.Lock()
	n := len(attached.m) + len(attached.draining)
	attached.Unlock()
	if n != 0 {
		t.Fatalf("%d registry entries left after every use detached", n)
	}
}
