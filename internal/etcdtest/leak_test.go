package etcdtest

import (
	"fmt"
	"os"
	"os/exec"
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

// TestSweepRemovesADeadBinarysData: a member's data directory is removed
// by a later test binary once the binary that made it is gone, and not
// while it runs.
func TestSweepRemovesADeadBinarysData(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true command:", err)
	}
	dead := cmd.Process.Pid
	if alive(dead) {
		t.Skipf("pid %d was reused at once", dead)
	}
	gone, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dataPrefix, dead))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dataPrefix, os.Getppid()))
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(kept)
	sweep()
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the dead binary's directory %s is still there (%v)", gone, err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a live binary's directory was removed: %v", err)
	}
}
