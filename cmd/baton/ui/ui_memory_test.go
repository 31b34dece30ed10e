package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/ui"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// childHeap asks the child for its live heap and waits for the answer.
func childHeap(t *testing.T, p *os.Process, path string, n int) uint64 {
	t.Helper()
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if f := strings.Fields(string(b)); len(f) == 2 && f[0] == strconv.Itoa(n) {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heap report %d from the child", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// churn makes n holders come and go on 100 lock names, 100 at a time, on
// leases named by number from first; it returns the last revision.
func churn(t *testing.T, cli *clientv3.Client, ns string, first, n int) int64 {
	t.Helper()
	// 200 transactions of 100 operations per 10,000 holders: a setup step,
	// bounded for a loaded machine, not a measure of baton.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var rev int64
	for b := 0; b < n; b += 100 {
		var puts, dels []clientv3.Op
		for i := b; i < min(b+100, n); i++ {
			key := fmt.Sprintf("/%s/v1/lock/job-%d/%x", ns, i%100, 0x10000+first+i)
			puts = append(puts, clientv3.OpPut(key, "holder-"+strconv.Itoa(first+i)))
			dels = append(dels, clientv3.OpDelete(key))
		}
		for _, ops := range [][]clientv3.Op{puts, dels} {
			resp, err := cli.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
	}
	return rev
}

// 20,000 holders come and go with no page open: baton ui's heap returns
// to within 10 % of where it was.
func TestUIMemoryIsBoundedWithoutAPage(t *testing.T) {
	ns := fmt.Sprintf("ui-mem-%d", time.Now().UnixNano())
	addr, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	heapFile := filepath.Join(t.TempDir(), "heap")
	cmd := exec.Command(os.Args[0], "--endpoints", clitest.Srv.Endpoint(), "--namespace", ns, "ui", "--listen", addr)
	cmd.Env = append(os.Environ(), clitest.HeapFileEnv+"="+heapFile)
	var errOut clitest.SyncBuffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	base := "http://" + addr
	clitest.WaitStatus(t, base+"/", 200)
	// Reads of /state.json are not a page: no viewer is counted.
	caughtUp := func(rev int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, body, err := clitest.HttpGet(t, base+"/state.json")
			var s ui.Snapshot
			if err == nil && json.Unmarshal([]byte(body), &s) == nil && s.Connected && s.Revision >= rev && len(s.Objects) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("baton ui did not catch up with revision %d: %v %.300s\n%s", rev, err, body, errOut.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	settle := func(rev int64) {
		caughtUp(rev)
		time.Sleep(4 * 250 * time.Millisecond) // a few ticks of the lease table's pruning
	}
	cli := clitest.Srv.Client(t)
	// Warm up until the bounded histories (timeline, 2,000 spans) are full.
	settle(churn(t, cli, ns, 0, 3000))
	start := childHeap(t, cmd.Process, heapFile, 1)
	settle(churn(t, cli, ns, 3000, 20000))
	end := childHeap(t, cmd.Process, heapFile, 2)
	t.Logf("FIGURE baton ui live heap: %d B before, %d B after 20,000 holders came and went with no page open (%+.1f%%)",
		start, end, 100*(float64(end)-float64(start))/float64(start))
	if float64(end) > 1.10*float64(start) {
		t.Fatalf("heap grew from %d to %d bytes (more than 10%%) with no page open", start, end)
	}
}
