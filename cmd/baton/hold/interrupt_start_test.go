//go:build linux

package hold_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/supervise"
)

// A SIGTERM that arrives once the hold is taken, before the command is
// started, ends baton like a SIGTERM while waiting (143): the command is
// not started, even one that ignores SIGTERM, and the hold is released.
func TestSignalBeforeTheCommandStartsDoesNotStartIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ns = "prestart"
	for _, c := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"lock", "mutex"}, "/prestart/v1/lock/mutex/"},
		{[]string{"lock", "sem", "--limit", "2"}, "/prestart/v1/semaphore/sem/"},
		{[]string{"lock", "rw", "--shared"}, "/prestart/v1/rwlock/rw/"},
		{[]string{"elect", "el", "v"}, "/prestart/v1/election/el/"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			supervise.TestHookBeforeCommand = func(ictx context.Context) {
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
				<-ictx.Done()
			}
			defer func() { supervise.TestHookBeforeCommand = nil }()
			// The supervisor is started through a wrapper that leaves a
			// mark: a command started and stopped at once leaves none.
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			mark, wrapper := filepath.Join(dir, "started"), filepath.Join(dir, "supervisor")
			script := fmt.Sprintf("#!/bin/sh\necho >> %s\nexec %s \"$@\"\n", mark, self)
			if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			var out, errOut clitest.SyncBuffer
			env := map[string]string{"BATON_ENDPOINTS": clitest.Srv.Endpoint()}
			io := cmdutil.IO{In: strings.NewReader(""), Out: &out, Err: &errOut, Getenv: func(k string) string { return env[k] }, Executable: wrapper}
			args := append([]string{"--namespace", ns}, c.args...)
			code := clitest.Main(ctx, append(args, "--", "sh", "-c", "echo started"), io)
			_, serr := os.Stat(mark)
			if code != 128+int(syscall.SIGTERM) || serr == nil || strings.Contains(out.String(), "started") {
				t.Errorf("exit %d (want 143), supervisor started: %v, want neither it nor the command started\nstdout:\n%s\nstderr:\n%s",
					code, serr == nil, out.String(), errOut.String())
			}
			resp, err := clitest.Srv.Client(t).Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count != 0 {
				t.Errorf("%d keys left under %s: the hold was not released", resp.Count, c.prefix)
			}
		})
	}
}
