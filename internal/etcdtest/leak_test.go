package etcdtest

import (
	"strings"
	"testing"
	"time"
)

// TestLeakedFindsARunningGoroutine: the check sees a goroutine a test left.
func TestLeakedFindsARunningGoroutine(t *testing.T) {
	stop := make(chan struct{})
	started := make(chan struct{})
	go func() { close(started); <-stop }()
	<-started
	left := running()
	close(stop)
	found := false
	for _, st := range left {
		if strings.Contains(st, "TestLeakedFindsARunningGoroutine") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the test's goroutine is not among %d found", len(left))
	}
	for range 250 { // 5 s
		gone := true
		for _, st := range running() {
			if strings.Contains(st, "TestLeakedFindsARunningGoroutine.func1") {
				gone = false
			}
		}
		if gone {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the goroutine is still listed after it returned")
}
