package compat

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// fatalTB records a Fatalf and ends the calling goroutine, as testing.T
// does, so that a test can see Start give up.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// TestStartFailsWhenAMemberCannotListen: a member whose port was taken
// between FreeAddr and its start exits at once, and the other two still
// elect a leader and answer; Start must not hand such a cluster to a test
// as a 3-member one (a test probing the first member then saw "connection
// refused").
func TestStartFailsWhenAMemberCannotListen(t *testing.T) {
	var b Binaries
	for _, minor := range Versions {
		if found, err := Find(minor); err == nil {
			b = found
			break
		}
	}
	if b.Etcd == "" {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("binaries required (%s=1): none of %v found", RequireEnv, Versions)
		}
		t.Skip("no etcd binaries")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	freeAddr = func() (string, error) {
		if calls++; calls == 1 { // m1's client address
			return taken.Addr().String(), nil
		}
		return etcdtest.FreeAddr()
	}
	defer func() { freeAddr = etcdtest.FreeAddr }()

	ftb := &fatalTB{TB: t}
	done := make(chan *Cluster)
	go func() {
		var c *Cluster
		defer func() { done <- c }()
		c = Start(ftb, b, Options{})
	}()
	c := <-done
	if c != nil {
		t.Fatalf("Start returned a cluster whose member m1 could not listen on %s (running: %v)", taken.Addr(), c.members[0].Running())
	}
	if !strings.Contains(ftb.msg, "m1 exited while the cluster started") {
		t.Fatalf("Start gave up with %q, want m1's exit named", ftb.msg)
	}
}
