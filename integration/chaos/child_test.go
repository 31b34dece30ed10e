package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/mutex"
)

// A holder child is this test binary run again with roleEnv set: "lock"
// takes a lock, "leader" campaigns. It prints "held <token> <key>", then
// obeys commands on stdin, one a line:
//
//	check          answers "alive" or "lost <cause>" from its Context
//	write <label>  writes with its token, without checking anything first,
//	               and answers one "result <path> <outcome>" line per path,
//	               "ctx <state>", then "wrote"
//	exit           releases and exits
//
// "check" then a SIGSTOP models the zombie: a holder that checked its
// Context, was paused, and writes with its old token once resumed.
const (
	endpointsEnv = "BATON_CHAOS_ENDPOINTS"
	nameEnv      = "BATON_CHAOS_NAME"
	ttlEnv       = "BATON_CHAOS_TTL"
	resourceEnv  = "BATON_CHAOS_RESOURCE" // the HTTP resource's URL
	registerEnv  = "BATON_CHAOS_REGISTER" // the etcd register's key and fence resource
	lockDelayEnv = "BATON_CHAOS_LOCK_DELAY"
)

// owner is what a *mutex.Lock and an *election.Term have in common.
type owner interface {
	Token() fencing.Token
	Key() string
	Context() context.Context
	Txn(ctx context.Context) clientv3.Txn
	IsOwner() clientv3.Cmp
}

func childMain(role string) int {
	if err := runChild(role); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func runChild(role string) error {
	ttl, err := time.ParseDuration(os.Getenv(ttlEnv))
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: strings.Split(os.Getenv(endpointsEnv), ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	name := os.Getenv(nameEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o owner
	var release func()
	switch role {
	case "lock":
		d, _ := time.ParseDuration(os.Getenv(lockDelayEnv)) // unset: none
		m, err := mutex.New(cli, name, mutex.WithTTL(ttl), mutex.WithLockDelay(d))
		if err != nil {
			return err
		}
		defer m.Close()
		l, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		o, release = l, func() { _ = l.Unlock(context.Background()) }
	case "leader":
		e, err := election.New(cli, name, election.WithTTL(ttl))
		if err != nil {
			return err
		}
		defer e.Close()
		term, err := e.Campaign(ctx, fmt.Sprintf("child-%d", os.Getpid()))
		if err != nil {
			return err
		}
		o, release = term, func() { _ = term.Resign(context.Background()) }
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	guard, err := fencing.NewEtcdGuard(cli)
	if err != nil {
		return err
	}
	fmt.Printf("held %d %s\n", o.Token(), o.Key())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd := strings.Fields(in.Text())
		if len(cmd) == 0 {
			continue
		}
		switch cmd[0] {
		case "check":
			fmt.Println(ctxState(o.Context()))
		case "write":
			zombieWrite(cli, guard, o, cmd[1])
			fmt.Println("ctx", ctxState(o.Context()))
			fmt.Println("wrote")
		case "exit":
			release()
			return nil
		}
	}
	return in.Err()
}

func ctxState(ctx context.Context) string {
	if ctx.Err() == nil {
		return "alive"
	}
	return "lost " + context.Cause(ctx).Error()
}

// zombieWrite writes label with o's token by every path, checking nothing
// first, and reports each outcome.
func zombieWrite(cli *clientv3.Client, guard *fencing.EtcdGuard, o owner, label string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	register := os.Getenv(registerEnv)
	outcome := func(err error) string {
		if err != nil {
			return "rejected " + err.Error()
		}
		return "accepted"
	}

	status, err := postWrite(ctx, http.DefaultClient, os.Getenv(resourceEnv), o.Token(), label)
	switch {
	case err != nil:
		fmt.Println("result http error", err)
	case status == http.StatusOK:
		fmt.Println("result http accepted")
	default:
		fmt.Println("result http rejected status", status)
	}

	// The fenced transaction of the Lock or Term.
	_, err = o.Txn(ctx).Then(clientv3.OpPut(register, label)).Commit()
	fmt.Println("result fenced-txn", outcome(err))

	// The same comparison sent as is, so that etcd itself decides even
	// when the handle already knows it lost.
	resp, err := cli.Txn(ctx).If(o.IsOwner()).Then(clientv3.OpPut(register, label)).Commit()
	switch {
	case err != nil:
		fmt.Println("result owner-txn error", err)
	case resp.Succeeded:
		fmt.Println("result owner-txn accepted")
	default:
		fmt.Println("result owner-txn rejected by etcd")
	}

	// The durable guard, by token alone.
	_, err = guard.Write(ctx, tokenHolder{cli: cli, token: o.Token()}, register, clientv3.OpPut(register+"/value", label))
	fmt.Println("result etcd-guard", outcome(err))
}

// child is a running holder child, seen from the test.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
}

// startChild runs a holder child with role and the given environment.
func startChild(t *testing.T, role string, env map[string]string) *child {
	t.Helper()
	c := &child{t: t, lines: make(chan string, 64)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), roleEnv+"="+role)
	for k, v := range env {
		c.cmd.Env = append(c.cmd.Env, k+"="+v)
	}
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		for range c.lines { // drain so the reader reaches EOF
		}
		<-read
		_ = c.cmd.Wait()
		if t.Failed() && c.stderr.Len() > 0 {
			t.Logf("child %d stderr:\n%s", c.cmd.Process.Pid, c.stderr.String())
		}
	})
	return c
}

// next returns the child's next line, failing the test after d.
func (c *child) next(d time.Duration) string {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatal("child exited (its stderr follows at cleanup)")
		}
		return l
	case <-time.After(d):
		c.t.Fatalf("child said nothing within %v", d)
	}
	return ""
}

func (c *child) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatalf("write to child: %v", err)
	}
}

func (c *child) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v: %v", sig, err)
	}
}

// held waits for the child's "held" line and returns its token and key.
func (c *child) held(d time.Duration) (fencing.Token, string) {
	c.t.Helper()
	line := c.next(d)
	var tok int64
	var key string
	if _, err := fmt.Sscanf(line, "held %d %s", &tok, &key); err != nil {
		c.t.Fatalf("child said %q, want held <token> <key>", line)
	}
	return fencing.Token(tok), key
}
