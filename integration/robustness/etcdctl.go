package robustness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
)

// TrafficEtcdctl: etcd's own CLI, `etcdctl lock` and `etcdctl elect`,
// contending in baton's prefixes as separate processes with sessions of
// their own (Config.Etcdctl).
const TrafficEtcdctl = "etcdctl"

// etcdctl runs two `etcdctl lock` processes on the lanes' mutexes and one
// `etcdctl elect` on election e1, at once, each held briefly and then
// released by SIGTERM, as an operator's would be.
func (m *mech) etcdctl(ctx context.Context, rng *rand.Rand) {
	var wg sync.WaitGroup
	run := m.runs
	for i := 0; i < 3; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			pause(ctx, time.Duration(g.IntN(100))*time.Millisecond)
			who := fmt.Sprintf("%s.c%d-%d", m.client(), i, run)
			if i == 2 {
				n := m.r.name("election", "e1")
				m.ctlHold(ctx, g, n, who, "etcdctl.Campaign", "elect", strings.TrimSuffix(n.Prefix, "/"), who)
				return
			}
			n := m.r.name("mutex", []string{"m0", "m1"}[g.IntN(2)])
			m.ctlHold(ctx, g, n, who, "etcdctl.Lock", "lock", "--ttl", strconv.Itoa(int(m.r.cfg.TTL/time.Second)), strings.TrimSuffix(n.Prefix, "/"))
		}()
	}
	wg.Wait()
}

// ctlHold runs etcdctl with args until it prints the key it holds (its
// first line: `lock` prints the key, `elect` the key and then the
// proposal), records the hold with the key's CreateRevision as its token,
// writes the evidence of holding through the suite's client, and ends
// the process with SIGTERM, on which etcdctl releases and exits.
func (m *mech) ctlHold(ctx context.Context, rng *rand.Rand, n NameInfo, who, kind string, args ...string) {
	start := now()
	cmd := exec.Command(m.r.cfg.Etcdctl, append([]string{"--endpoints", strings.Join(m.cli.Endpoints(), ","), "--dial-timeout", "2s"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		m.r.took(who, kind, n, start, nil, err, true)
		return
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		m.r.took(who, kind, n, start, nil, err, true)
		return
	}
	if kind == "etcdctl.Campaign" {
		// etcdctl elect's session has etcd's default TTL, 60 s, and no
		// flag to shorten it: an elect killed, or whose Campaign gave up
		// without its resign reaching etcd, leaves its key for a minute.
		// Its proposal (who) names it; the suite revokes its lease once
		// the process is gone, as an operator would.
		defer m.revokeLeft(n, who)
	}
	exited := make(chan struct{})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait() // stderr is complete once it returned
		close(exited)
	}()
	// stop ends the process: SIGTERM, then SIGKILL if it outlives 10 s.
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	wait, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	var key string
	select {
	case key = <-first:
	case <-exited:
		err = fmt.Errorf("etcdctl exited before it held: %s", strings.TrimSpace(stderr.String()))
	case <-wait.Done():
		err = wait.Err()
	}
	var h handle
	if err == nil {
		h, err = m.ctlHandle(wait, key, exited)
	}
	if m.r.took(who, kind, n, start, h, err, true) == nil {
		stop()
		return
	}
	m.r.holdBriefly(ctx, rng, who, n, h, 200*time.Millisecond)
	start = now()
	stop()
	var rerr error
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		rerr = fmt.Errorf("etcdctl: %v: %s", cmd.ProcessState, strings.TrimSpace(stderr.String()))
	}
	m.r.released(who, n, h, start, rerr)
}

// ctlHandle reads the CreateRevision of the key etcdctl printed; the
// hold's Context ends when the process exits.
func (m *mech) ctlHandle(ctx context.Context, key string, exited <-chan struct{}) (handle, error) {
	resp, err := m.cli.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, errors.New("etcdctl's key gone")
	}
	hctx, cancel := context.WithCancel(context.Background())
	go func() { <-exited; cancel() }()
	return etcdHold{tokenHolder: tokenHolder{cli: m.cli, key: key, token: fencing.Token(resp.Kvs[0].CreateRevision)}, ctx: hctx}, nil
}

// revokeLeft revokes the lease of every key under n's prefix whose value
// is who (an etcdctl elect's proposal), for at most 5 s.
func (m *mech) revokeLeft(n NameInfo, who string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		resp, err := m.cli.Get(ctx, n.Prefix, clientv3.WithPrefix())
		if err == nil {
			left := 0
			for _, kv := range resp.Kvs {
				if string(kv.Value) == who && kv.Lease != 0 {
					left++
					_, _ = m.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease))
				}
			}
			if left == 0 {
				return
			}
		}
		pause(ctx, 100*time.Millisecond)
	}
}
