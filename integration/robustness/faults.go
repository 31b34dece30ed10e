package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/internal/keys"
)

// The fault kinds.
const (
	FaultMemberKill     = "member-kill"     // SIGKILL-like stop of one member, restart on its data
	FaultQuorumLoss     = "quorum-loss"     // two of three members down, then both back
	FaultLeaderTransfer = "leader-transfer" // Raft leadership moved to a follower
	FaultBlackhole      = "blackhole"       // a client cut off from every member, connections open
	FaultSlowLink       = "slow-link"       // a client's traffic delayed both ways
	FaultCompact        = "compact-defrag"  // compaction then defragmentation of every member, under watches
	FaultAdminDelete    = "admin-delete"    // an operator deletes a holder's key
	FaultAdminRevoke    = "admin-revoke"    // an operator revokes a holder's lease
	FaultFreeze         = "holder-freeze"   // a holder process stopped (SIGSTOP) past its TTL, then resumed
	FaultClockSkew      = "clock-skew"      // a worker's lease clock 15% slow and jumping forward, while it is cut off
	FaultMemberIsolate  = "member-isolate"  // a member (the leader half the time) cut from its peers, not from its clients
	FaultOperatorKeys   = "operator-keys"   // an operator deletes the release marks, range-deletes a name's contender keys, or an election's candidate records and moved marks
	FaultReplyLost      = "reply-lost"      // clients' requests apply and their replies are lost: they hear nothing, their connections are cut, they retry
	FaultLateRequest    = "late-request"    // clients' requests held back, their connections cut (they retry elsewhere), the held requests delivered late
	// FaultOperatorCLI is not drawn by the fault loop: the cli-force
	// traffic records each `baton unlock/resign --force` it runs as one.
	FaultOperatorCLI = "operator-cli"
	// FaultShardCrash is the shard traffic's: a member's lease revoked.
	FaultShardCrash = "shard-crash"
)

// FaultKinds lists the kinds a run injects; holder-freeze needs holder
// processes, member-isolate a PeerCutter target.
//
// A member restarted from an older snapshot of its data is not among
// them: it is not safe. A member that forgets Raft log entries and votes
// it acknowledged breaks Raft's own assumptions (a committed write can be
// lost, two leaders can be elected in one term), so what the checks
// found would be etcd's broken durability, not the lock layer's.
func FaultKinds(processes bool) []string {
	k := []string{FaultMemberKill, FaultQuorumLoss, FaultLeaderTransfer, FaultBlackhole, FaultSlowLink,
		FaultCompact, FaultAdminDelete, FaultAdminRevoke, FaultClockSkew, FaultOperatorKeys, FaultMemberIsolate,
		FaultReplyLost, FaultLateRequest}
	if processes {
		k = append(k, FaultFreeze)
	}
	return k
}

func knownFault(k string) bool { return slices.Contains(FaultKinds(true), k) }

// faultPhase is how long faults follow one another before a quiet while.
const faultPhase = 18 * time.Second

type faulter struct {
	r      *runner
	events *eventLog
	rng    *rand.Rand
	// unheard is the holder key an admin's call failed on, unanswered: it
	// may apply later, so the key's incarnation is the fault's (Fault.Keys).
	unheard *Fault
	// clients are the clients a fault of one client's connection hit.
	clients []string
}

func (f *faulter) sleep(ctx context.Context, minMs, spanMs int) {
	pause(ctx, time.Duration(minMs+f.rng.IntN(spanMs))*time.Millisecond)
}

// loop injects one fault at a time until deadline: a quiet while, a
// fault, its healing. Kinds are dealt from a shuffled deck, every kind
// once a round, so that a short run (CI's 75 s runs about 15) has each.
//
// Every faultPhase of faults is followed by a quiet while of 8 to 12 s,
// so that the checks that judge only with no fault near (a free lock is
// taken) have time to judge in.
func (f *faulter) loop(ctx context.Context, deadline time.Time) {
	phase := time.Now()
	var deck []string
	for {
		f.sleep(ctx, 500, 2500)
		if time.Since(phase) > faultPhase {
			start := now()
			f.r.quietFrom.Store(start)
			f.sleep(ctx, 8000, 4000)
			f.r.quietFrom.Store(0)
			f.r.h.quiet(start, now())
			fmt.Fprintf(f.r.log, "robustness: %8s quiet for %s\n", since(f.r.h.Start, start), time.Duration(now()-start).Round(time.Millisecond))
			phase = time.Now()
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return
		}
		if len(deck) == 0 {
			deck = slices.Clone(f.r.cfg.Faults)
			f.rng.Shuffle(len(deck), func(a, b int) { deck[a], deck[b] = deck[b], deck[a] })
		}
		kind := deck[0]
		deck = deck[1:]
		// The fault's own choices come from a generator of its own, so
		// that what etcd's timing changes inside one fault (an early
		// error, a wait) leaves the next faults as the seed made them.
		inner := &faulter{r: f.r, events: f.events, rng: rand.New(rand.NewPCG(f.rng.Uint64(), f.rng.Uint64()))}
		fctx, cancel := context.WithDeadline(ctx, deadline.Add(10*time.Second))
		fl := Fault{Kind: kind, Start: now()}
		detail, revs, err := inner.inject(fctx, kind)
		cancel()
		fl.End, fl.Detail, fl.Revs = now(), detail, revs
		if u := inner.unheard; u != nil {
			fl.Keys, fl.Tokens, fl.RevFrom = u.Keys, u.Tokens, u.RevFrom
		}
		fl.Clients = inner.clients
		if err != nil {
			fl.Detail += " (" + err.Error() + ")"
		}
		f.r.h.fault(fl)
		fmt.Fprintf(f.r.log, "robustness: %8s %s %s\n", since(f.r.h.Start, fl.Start), kind, fl.Detail)
	}
}

// inject runs one fault from start to healing; the healing always runs,
// even when ctx ends.
func (f *faulter) inject(ctx context.Context, kind string) (string, []int64, error) {
	t := f.r.cfg.Target
	ttl := f.r.cfg.TTL
	n := len(t.Endpoints())
	switch kind {
	case FaultMemberKill:
		i := f.rng.IntN(n)
		if err := t.Kill(i); err != nil {
			return "", nil, err
		}
		f.sleep(ctx, 300, 3000)
		return fmt.Sprintf("member %d", i), nil, t.Restart(context.Background(), i)
	case FaultQuorumLoss:
		i := f.rng.IntN(n)
		j := (i + 1 + f.rng.IntN(n-1)) % n
		_ = t.Kill(i)
		_ = t.Kill(j)
		f.sleep(ctx, 500, int(ttl/time.Millisecond)+1000)
		return fmt.Sprintf("members %d and %d", i, j), nil, t.Restart(context.Background(), i, j)
	case FaultLeaderTransfer:
		lead, ids, err := memberStatus(ctx, t)
		if err != nil {
			return "", nil, err
		}
		var to []int
		for i, id := range ids {
			if i != lead && id != 0 {
				to = append(to, i)
			}
		}
		if len(to) == 0 {
			return "", nil, fmt.Errorf("no follower to move to")
		}
		j := to[f.rng.IntN(len(to))]
		cli, err := newClient([]string{t.Endpoints()[lead]})
		if err != nil {
			return "", nil, err
		}
		defer cli.Close()
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = cli.MoveLeader(mctx, ids[j])
		return fmt.Sprintf("member %d to %d", lead, j), nil, err
	case FaultBlackhole, FaultSlowLink:
		f.r.mu.Lock()
		parts := append([]*cluster.Partition(nil), f.r.parts...)
		f.r.mu.Unlock()
		if len(parts) == 0 {
			return "no client", nil, nil
		}
		// A worker (the first clients are the workers'), and maybe one
		// more client of any kind: an observer's, or another worker's.
		chosen := []int{f.rng.IntN(min(f.r.cfg.Workers, len(parts)))}
		if other := f.rng.IntN(len(parts)); f.rng.IntN(2) == 0 && other != chosen[0] {
			chosen = append(chosen, other)
		}
		sort.Ints(chosen)
		f.r.mu.Lock()
		for _, c := range chosen {
			f.clients = append(f.clients, f.r.partOf[c])
		}
		f.r.mu.Unlock()
		for _, c := range chosen {
			if kind == FaultBlackhole {
				parts[c].Blackhole()
			} else {
				parts[c].SetDelay(time.Duration(50+f.rng.IntN(350)) * time.Millisecond)
			}
		}
		if kind == FaultBlackhole {
			f.sleep(ctx, int(ttl/time.Millisecond)/2, int(2*ttl/time.Millisecond))
		} else {
			f.sleep(ctx, 1000, 5000)
		}
		for _, c := range chosen {
			heal(parts[c])
		}
		return fmt.Sprintf("clients %v", chosen), nil, nil
	case FaultCompact:
		// Never past what the event log has received: its view stays
		// complete.
		rev := f.events.Progress()
		if rev < 2 {
			return "nothing to compact", nil, nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := f.r.admin.Compact(cctx, rev); err != nil {
			return fmt.Sprintf("at %d", rev), nil, err
		}
		for i, ep := range t.Endpoints() {
			if t.Running(i) {
				if _, err := f.r.admin.Defragment(cctx, ep); err != nil {
					return fmt.Sprintf("at %d", rev), nil, fmt.Errorf("defragment member %d: %w", i, err)
				}
			}
		}
		return fmt.Sprintf("at %d, defragmented", rev), nil, nil
	case FaultAdminDelete, FaultAdminRevoke:
		return f.admin(ctx, kind)
	case FaultClockSkew:
		f.r.mu.Lock()
		ws := append([]*worker(nil), f.r.workers...)
		f.r.mu.Unlock()
		if len(ws) == 0 {
			return "no worker", nil, nil
		}
		w := ws[f.rng.IntN(len(ws))]
		f.clients = []string{w.client()}
		w.clock.set(0.85)
		w.part.Blackhole()
		end := time.Now().Add(ttl + time.Duration(f.rng.IntN(int(ttl/time.Millisecond)))*time.Millisecond)
		jumps := 0
		for time.Now().Before(end) && ctx.Err() == nil {
			f.sleep(ctx, 200, 800)
			if f.rng.IntN(2) == 0 {
				w.clock.jump(time.Duration(100+f.rng.IntN(900)) * time.Millisecond)
				jumps++
			}
		}
		heal(w.part)
		f.sleep(ctx, 500, 1500)
		w.clock.set(1)
		return fmt.Sprintf("%s: 0.85x, %d jumps forward, cut off", w.client(), jumps), nil, nil
	case FaultOperatorKeys:
		return f.operatorKeys(ctx)
	case FaultMemberIsolate:
		return f.isolate(ctx)
	case FaultReplyLost, FaultLateRequest:
		return f.lateApplies(ctx, kind)
	case FaultFreeze:
		// Wait a little for a child that holds: they hold a fraction of
		// the time.
		c := f.r.holdingChild(f.rng)
		for tries := 0; c == nil && tries < 60 && ctx.Err() == nil; tries++ {
			pause(ctx, 50*time.Millisecond)
			c = f.r.holdingChild(f.rng)
		}
		if c == nil {
			return "no holder process", nil, nil
		}
		f.clients = []string{fmt.Sprintf("c%d", c.id)}
		if err := c.freeze(); err != nil {
			return "", nil, err
		}
		f.sleep(ctx, int(ttl/time.Millisecond)+500, 1500)
		return fmt.Sprintf("child %d", c.id), nil, c.thaw()
	}
	return "", nil, fmt.Errorf("unknown fault %q", kind)
}

// isolatedReader is the register checker's client ID of the reads
// through an isolated member.
const isolatedReader = 1 << 20

// isolate cuts a member (the leader half the time) from its peers, its
// clients still reaching it, for TTL/2 to 1.5 TTL (it loses its leader
// or its leadership after an election timeout, 500 ms): the workers' clients
// go on through it, and a client of that member alone reads the lanes'
// registers linearizably. A read must fail, or be one the register
// checker finds linearizable.
func (f *faulter) isolate(ctx context.Context) (string, []int64, error) {
	t := f.r.cfg.Target
	pc := t.(PeerCutter) // Run allows the kind for such targets alone
	i, what := f.rng.IntN(len(t.Endpoints())), "member"
	if lead, _, err := memberStatus(ctx, t); err == nil && f.rng.IntN(2) == 0 {
		i, what = lead, "leader"
	}
	if !t.Running(i) {
		return fmt.Sprintf("member %d down", i), nil, nil
	}
	cli, err := newClient([]string{t.Endpoints()[i]})
	if err != nil {
		return "", nil, err
	}
	defer cli.Close()
	pc.CutPeers(i)
	defer pc.MendPeers(i)
	ttl := f.r.cfg.TTL
	end := time.Now().Add(ttl/2 + time.Duration(f.rng.IntN(int(ttl/time.Millisecond)))*time.Millisecond)
	names := f.r.laneNames
	served, failed := 0, 0
	for k := 0; k < 1000 && time.Now().Before(end) && ctx.Err() == nil; k++ {
		if f.r.readRegister(isolatedReader, cli, names[k%len(names)]) {
			served++
		} else {
			failed++
		}
		f.sleep(ctx, 50, 100)
	}
	return fmt.Sprintf("%s %d cut from its peers; linearizable reads through it: %d served, %d failed", what, i, served, failed), nil, nil
}

// lateApplies makes requests apply after their callers gave up on them: on 2
// or 3 clients (the workers' and the traffic kinds', which write), 3 to 6
// times over, their requests go through and their replies are held back
// (reply-lost), or their requests are held back (late-request), for 100
// to 400 ms; then their connections are cut: every call in flight fails
// unanswered, and retries on a new connection, perhaps to another member.
// The replies held back are lost; the requests held back reach their
// members 0.3 to 1.5 s later, on the old connections. What a request may
// do when it applies late is what the paths for unheard writes are for:
// the enqueue fence, the unheard commit of a Set's release or a
// hand-over, a release retried after its first attempt applied.
func (f *faulter) lateApplies(ctx context.Context, kind string) (string, []int64, error) {
	f.r.mu.Lock()
	var parts []*cluster.Partition
	var names []string
	for i, p := range f.r.parts {
		if !strings.HasPrefix(f.r.partOf[i], "o") { // observers only read
			parts, names = append(parts, p), append(names, f.r.partOf[i])
		}
	}
	f.r.mu.Unlock()
	if len(parts) == 0 {
		return "no client", nil, nil
	}
	f.rng.Shuffle(len(parts), func(a, b int) { parts[a], parts[b] = parts[b], parts[a]; names[a], names[b] = names[b], names[a] })
	k := min(len(parts), 2+f.rng.IntN(2))
	parts, names = parts[:k], names[:k]
	f.clients = names
	times := 3 + f.rng.IntN(4)
	var longest time.Duration
	for range times {
		for _, p := range parts {
			if kind == FaultReplyLost {
				p.LoseReplies()
			} else {
				p.HoldRequests()
			}
		}
		f.sleep(ctx, 100, 300)
		late := time.Duration(0)
		if kind == FaultLateRequest {
			late = time.Duration(300+f.rng.IntN(1200)) * time.Millisecond
		}
		for _, p := range parts {
			p.Sever(late, unheardLinger)
		}
		longest = max(longest, late)
		f.sleep(ctx, 300, 700)
	}
	pause(ctx, longest+unheardLinger) // the fault lasts until the last late request applied
	return fmt.Sprintf("clients %v, %d times", names, times), nil, nil
}

// unheardLinger is how long a severed connection's server side stays
// open after its held requests were delivered: the member applies them.
const unheardLinger = time.Second

// admin deletes a holder's key, or revokes its lease, as an operator
// would: the holder of a random name, found by a read.
func (f *faulter) admin(ctx context.Context, kind string) (string, []int64, error) {
	names := f.r.cfg.names
	start := f.rng.IntN(len(names))
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for k := range names {
		n := names[(start+k)%len(names)]
		resp, err := f.r.admin.Get(actx, n.Prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return "", nil, err
		}
		for _, kv := range resp.Kvs {
			if !isContender(n, string(kv.Key)) {
				continue
			}
			key := string(kv.Key)
			// A call that fails may still apply, after the fault's end:
			// any later deletion of this incarnation may be the admin's.
			f.unheard = &Fault{Keys: []string{key}, Tokens: []int64{kv.CreateRevision}, RevFrom: resp.Header.Revision}
			if kind == FaultAdminDelete {
				tr, err := f.r.admin.Txn(actx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision)).
					Then(clientv3.OpDelete(key)).Commit()
				if err != nil {
					return key, nil, err
				}
				f.unheard = nil
				return fmt.Sprintf("%s token %d", key, kv.CreateRevision), []int64{tr.Header.Revision}, nil
			}
			lr, err := f.r.admin.Revoke(actx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return fmt.Sprintf("lease %x of %s", kv.Lease, key), nil, err
			}
			f.unheard = nil
			return fmt.Sprintf("lease %x of %s", kv.Lease, key), []int64{lr.Header.Revision}, nil
		}
	}
	return "no holder", nil, nil
}

// operatorKeys deletes what an operator with readwrite on the namespace
// may (docs/security.md): the release marks, every contender key of one
// name in one range delete, or an election's candidate records and moved
// marks. The revisions it deleted holder keys at are not announced.
func (f *faulter) operatorKeys(ctx context.Context) (string, []int64, error) {
	ns := keys.NamespacePrefix(f.r.cfg.Namespace)
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var key string
	var opts []clientv3.OpOption
	switch f.rng.IntN(3) {
	case 0:
		resp, err := f.r.admin.Txn(actx).Then(clientv3.OpDelete(ns+"released"), clientv3.OpDelete(ns+"released-b")).Commit()
		if err != nil {
			return "release marks", nil, err
		}
		return "release marks", []int64{resp.Header.Revision}, nil
	case 1:
		names := f.r.cfg.names
		n := names[f.rng.IntN(len(names))]
		key, opts = n.Prefix, []clientv3.OpOption{clientv3.WithPrefix()}
	default:
		key = keys.KindPrefix(f.r.cfg.Namespace, keys.Kind("candidate"))
		opts = []clientv3.OpOption{clientv3.WithPrefix()}
	}
	resp, err := f.r.admin.Delete(actx, key, opts...)
	if err != nil {
		return "range " + key, nil, err
	}
	return fmt.Sprintf("range %s: %d keys", key, resp.Deleted), []int64{resp.Header.Revision}, nil
}

// healAll undoes anything a fault cut short: partitions restored, members
// restarted, frozen children resumed.
func (f *faulter) healAll() {
	f.r.mu.Lock()
	parts := append([]*cluster.Partition(nil), f.r.parts...)
	children := append([]*child(nil), f.r.children...)
	f.r.mu.Unlock()
	for _, p := range parts {
		heal(p)
	}
	for _, w := range f.r.workers {
		w.clock.set(1)
	}
	if pc, ok := f.r.cfg.Target.(PeerCutter); ok {
		for i := range f.r.cfg.Target.Endpoints() {
			pc.MendPeers(i)
		}
	}
	for _, c := range children {
		_ = c.thaw()
	}
	t := f.r.cfg.Target
	var down []int
	for i := range t.Endpoints() {
		if !t.Running(i) {
			down = append(down, i)
		}
	}
	if len(down) > 0 {
		if err := t.Restart(context.Background(), down...); err != nil {
			fmt.Fprintf(f.r.log, "robustness: restart %v after the run: %v\n", down, err)
		}
	}
}
