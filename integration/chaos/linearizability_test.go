package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/mutex"
)

// The fenced register's model: a write is accepted if and only if its
// token is at least the highest accepted so far; a read returns the last
// accepted value.
type regState struct {
	highest fencing.Token
	value   string
}

type regInput struct {
	write bool
	token fencing.Token
	value string
}

type regOutput struct {
	accepted bool
	unknown  bool // the call failed: it may or may not have taken effect
	value    string
}

var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		if !in.write {
			if out.value == s.value {
				return []any{s}
			}
			return nil
		}
		admits := in.token >= s.highest
		next := regState{highest: in.token, value: in.value}
		switch {
		case out.unknown && admits:
			return []any{s, next}
		case out.unknown:
			return []any{s}
		case out.accepted && admits:
			return []any{next}
		case !out.accepted && !admits:
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if !in.write {
			return fmt.Sprintf("read() -> %q", out.value)
		}
		switch {
		case out.unknown:
			return fmt.Sprintf("write(%d, %q) -> ?", in.token, in.value)
		case out.accepted:
			return fmt.Sprintf("write(%d, %q) -> accepted", in.token, in.value)
		}
		return fmt.Sprintf("write(%d, %q) -> rejected", in.token, in.value)
	},
}

// TestLinearizableFencedRegister has five clients, each behind its own
// partition, take a lock, write a register fenced by the durable etcd
// guard and release, for 30 s (12 s under -short), with random pauses
// between a holder's last check and its write (some past the TTL),
// random partitions and a member restart. The history of writes
// (admitted, rejected or failed) and reads is checked with porcupine
// against a register that admits a token at least the highest admitted.
// Also: admitted tokens never go backwards in etcd's order, every Lock
// that succeeded had its key in etcd with the token as CreateRevision, and
// no two in-process holders overlapped.
func TestLinearizableFencedRegister(t *testing.T) {
	c := cluster.Start(t, 3)
	const ttl = 2 * time.Second
	const clients = 5
	run := 30 * time.Second
	if testing.Short() {
		run = 12 * time.Second
	}
	const lockName, resourceName, valueKey = "lin-lock", "lin-register", "/chaos/lin/value"
	admin := c.Client(t)
	tr := newTracker()
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }

	var mu sync.Mutex
	var ops []porcupine.Operation
	type acq struct {
		key   string
		token fencing.Token
	}
	var acqs []acq
	type admitted struct {
		rev   int64
		token fencing.Token
	}
	var admits []admitted
	stats := map[string]int{}
	note := func(k string) { mu.Lock(); stats[k]++; mu.Unlock() }

	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var parts []*cluster.Partition
	var wg sync.WaitGroup
	for id := range clients {
		cli, part := c.Proxied(t)
		parts = append(parts, part)
		m, err := mutex.New(cli, lockName, mutex.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		guard, err := fencing.NewEtcdGuard(cli)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(id), uint64(base.UnixNano())))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
				l, err := m.Lock(lctx)
				lcancel()
				if err != nil {
					note("lock failed")
					continue
				}
				note("locks")
				mu.Lock()
				acqs = append(acqs, acq{key: l.Key(), token: l.Token()})
				mu.Unlock()
				tr.acquired(lockName, fmt.Sprintf("client-%d", id), int64(l.Token()), l.Done())
				if l.Context().Err() == nil {
					// The holder checked; now it may stall before writing, as a
					// process does in a GC pause: nothing it sends, renewals
					// included, gets through meanwhile.
					if rng.IntN(3) == 0 {
						note("pauses")
						part.Blackhole()
						time.Sleep(ttl + time.Duration(rng.Int64N(int64(3*ttl/2))))
						part.Restore()
					}
					value := fmt.Sprintf("c%d-%d", id, seq)
					in := regInput{write: true, token: l.Token(), value: value}
					wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
					call := now()
					resp, err := guard.Write(wctx, tokenHolder{cli: cli, token: l.Token()}, resourceName, clientv3.OpPut(valueKey, value))
					ret := now()
					wcancel()
					var out regOutput
					switch {
					case err == nil:
						out.accepted = true
						note("writes admitted")
						mu.Lock()
						admits = append(admits, admitted{rev: resp.Header.Revision, token: l.Token()})
						mu.Unlock()
					case errors.Is(err, fencing.ErrStale):
						note("writes rejected")
					default:
						out.unknown, ret = true, math.MaxInt64
						note("writes failed")
					}
					mu.Lock()
					ops = append(ops, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
					mu.Unlock()
				}
				if rng.IntN(2) == 0 {
					rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
					call := now()
					resp, err := cli.Get(rctx, valueKey)
					ret := now()
					rcancel()
					if err == nil { // a failed read has no effect: leave it out
						out := regOutput{}
						if len(resp.Kvs) > 0 {
							out.value = string(resp.Kvs[0].Value)
						}
						note("reads")
						mu.Lock()
						ops = append(ops, porcupine.Operation{ClientId: id, Input: regInput{}, Call: call, Output: out, Return: ret})
						mu.Unlock()
					}
				}
				for range 3 {
					uctx, ucancel := context.WithTimeout(context.Background(), 3*time.Second)
					err := l.Unlock(uctx)
					ucancel()
					if err == nil || errors.Is(err, mutex.ErrNotHeld) {
						break
					}
				}
			}
		}()
	}

	// Faults: partitions of random clients, and one member restart.
	faults := map[string]int{}
	restarted := false
	frng := rand.New(rand.NewPCG(7, uint64(base.UnixNano())))
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(1000+frng.IntN(1000)) * time.Millisecond):
		}
		if ctx.Err() != nil {
			break
		}
		if !restarted && time.Since(base) > run/3 {
			restarted = true
			mb := c.Member(frng.IntN(3))
			mb.Kill()
			faults["member restarts"]++
			time.Sleep(time.Duration(500+frng.IntN(1000)) * time.Millisecond)
			if err := mb.Restart(); err != nil {
				t.Errorf("restart %s: %v", mb.Name(), err)
			}
			continue
		}
		p := parts[frng.IntN(len(parts))]
		p.Blackhole()
		faults["partitions"]++
		d := time.Duration(300+frng.IntN(2200)) * time.Millisecond
		go func() {
			time.Sleep(d)
			p.Restore()
		}()
	}
	wg.Wait()
	for _, p := range parts {
		p.Restore()
	}

	// Linearizability of the register.
	mu.Lock()
	defer mu.Unlock()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(registerModel.ToModel(), ops, time.Minute)
	checked := time.Since(start)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Errorf("history of %d operations is not linearizable", len(ops))
		if dir := t.TempDir(); dir != "" {
			file := dir + "/history.html"
			if err := porcupine.VisualizePath(registerModel.ToModel(), info, file); err == nil {
				t.Logf("visualization: %s", file)
			}
		}
	default:
		t.Errorf("linearizability check of %d operations gave no answer within a minute", len(ops))
	}

	// Admitted tokens never go backwards, in etcd's order.
	sort.Slice(admits, func(i, j int) bool { return admits[i].rev < admits[j].rev })
	for i := 1; i < len(admits); i++ {
		if admits[i].token < admits[i-1].token {
			t.Errorf("token %d admitted at revision %d after token %d at revision %d",
				admits[i].token, admits[i].rev, admits[i-1].token, admits[i-1].rev)
		}
	}
	// Every successful Lock had its key, created at its token's revision.
	vctx := ctxTimeout(t, 30*time.Second)
	for _, a := range acqs {
		if a.key == "" {
			t.Errorf("Lock with token %d returned no key", a.token)
			continue
		}
		resp, err := admin.Get(vctx, a.key, clientv3.WithRev(int64(a.token)))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(a.token) {
			t.Errorf("Lock returned %s with token %d, but etcd had %v at that revision", a.key, a.token, resp.Kvs)
		}
	}
	tr.check(t)
	if stats["writes admitted"] == 0 || stats["writes rejected"] == 0 {
		t.Errorf("history too tame to prove anything: %v", stats)
	}
	figure(t, "%v with %d clients, TTL %v; faults %v; %v; %d operations checked by porcupine in %v: %v",
		run, clients, ttl, faults, stats, len(ops), checked.Round(time.Millisecond), res)
}

// TestRegisterModelCatchesStaleWrites shows that the check can fail: a
// write admitted with a lower token after a higher one, or a read of a
// value that was never the register's, is not linearizable.
func TestRegisterModelCatchesStaleWrites(t *testing.T) {
	w := func(id int, tok fencing.Token, v string, call, ret int64, out regOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: id, Input: regInput{write: true, token: tok, value: v}, Call: call, Output: out, Return: ret}
	}
	r := func(id int, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: id, Input: regInput{}, Call: call, Output: regOutput{value: v}, Return: ret}
	}
	ok, rejected, unknown := regOutput{accepted: true}, regOutput{}, regOutput{unknown: true}
	tests := []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{"handover", []porcupine.Operation{w(0, 5, "a", 0, 1, ok), w(1, 7, "b", 2, 3, ok), w(0, 5, "c", 4, 5, rejected), r(2, "b", 6, 7)}, porcupine.Ok},
		{"stale write admitted", []porcupine.Operation{w(0, 7, "b", 0, 1, ok), w(1, 5, "a", 2, 3, ok)}, porcupine.Illegal},
		{"current token rejected", []porcupine.Operation{w(0, 7, "b", 0, 1, ok), w(0, 7, "c", 2, 3, rejected)}, porcupine.Illegal},
		{"read of a rejected write", []porcupine.Operation{w(0, 7, "b", 0, 1, ok), w(1, 5, "a", 2, 3, rejected), r(2, "a", 4, 5)}, porcupine.Illegal},
		{"failed write may have landed", []porcupine.Operation{w(0, 7, "b", 0, math.MaxInt64, unknown), r(1, "b", 2, 3)}, porcupine.Ok},
		{"concurrent writes in either order", []porcupine.Operation{w(0, 7, "b", 0, 10, ok), w(1, 5, "a", 1, 9, ok), r(2, "b", 11, 12)}, porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperationsTimeout(registerModel.ToModel(), tt.history, 10*time.Second); got != tt.want {
				t.Fatalf("check = %v, want %v", got, tt.want)
			}
		})
	}
}
