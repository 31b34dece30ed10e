package robustness

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// Requests that apply after their callers gave up on them: the unheard
// traffic kind, which makes one on purpose at the step each path for
// unheard writes is for, and the two checks that judge what such a
// request did (given-up, told-truly). The reply-lost and late-request
// faults make them at random on other clients.

// unheard runs one of its four, in turn, on v0, v1 and ev0, on its own
// connection: an acquisition whose enqueue is held back until its caller
// gave up and its cleanup ran, then delivered (the enqueue fence); a
// release, a Set's release and a hand-over, each applied with its reply
// lost, then retried (a retried release, the unheard commits of a Set's
// release and of a hand-over). Each is recorded as a fault of its kind on
// those names alone.
func (m *mech) unheard(ctx context.Context, rng *rand.Rand) {
	switch m.runs % 4 {
	case 0:
		m.lateEnqueue(ctx)
	case 1:
		m.lostRelease(ctx, rng)
	case 2:
		m.lostSetRelease(ctx, rng)
	default:
		m.lostHandOver(ctx)
	}
}

// lateLinger is how long the unheard kind's session lives on after a
// held-back enqueue was delivered: a key it put (with no fence to void
// it) waits that long with nobody waiting in it.
const lateLinger = 10 * time.Second

// severed records the kind's own cut as a fault on names alone.
func (m *mech) severed(kind, detail string, start int64, names ...NameInfo) {
	f := Fault{Kind: kind, Detail: "unheard traffic: " + detail, Start: start, End: now(), Clients: []string{m.client()}}
	for _, n := range names {
		f.Keys = append(f.Keys, n.Prefix)
	}
	m.r.h.fault(f)
}

// lateEnqueue: a Lock of v0 whose enqueue is held back on one
// connection, which is cut 150 ms later, before the caller's 600 ms are
// up (a caller that gives up with its request in a connection cancels it
// there; a cut connection carries nothing more). Its retries and its
// cleanup are held back on the next connections until it gave up, then
// let through; the first enqueue reaches its member 4 s after the cut,
// once the cleanup is done (a cleanup that reads after it deletes what it
// put). The fence the cleanup raised voids it; the session then lives on
// without v0.
func (m *mech) lateEnqueue(ctx context.Context) {
	n := m.r.name("mutex", "v0")
	who := m.client() + ".late"
	s, err := session.New(m.cli, m.r.sessionOpts()...)
	if err != nil {
		m.r.h.op(Op{Client: who, Kind: "session.New", Call: now(), Return: now(), Err: err.Error()})
		return
	}
	defer func() {
		start := now()
		err := s.Close()
		m.r.h.op(Op{Client: who, Kind: "session.Close", Call: start, Return: now(), Err: errString(err)})
	}()
	mu, err := mutex.New(m.cli, n.Name, m.r.opts(n, s, who)...)
	if err != nil {
		return
	}
	defer mu.Close()
	// A first hold, released: the session's lease is granted before the
	// hold-back.
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	start := now()
	l, err := mu.Lock(actx)
	cancel()
	var h handle
	if err == nil {
		h = l
	}
	if m.r.took(who, "mutex.Lock", n, start, h, err, false) == nil {
		return
	}
	start = now()
	m.r.released(who, n, l, start, l.Unlock(context.Background()))

	start = now()
	m.part.HoldRequests()
	done := make(chan struct{})
	go func() {
		defer close(done)
		actx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
		defer cancel()
		start := now()
		l, err := mu.Lock(actx)
		var h handle
		if err == nil {
			h = l
		}
		if m.r.took(who, "mutex.Lock", n, start, h, err, false) != nil {
			m.r.released(who, n, l, now(), l.Unlock(context.Background()))
		}
	}()
	pause(context.Background(), 150*time.Millisecond)
	const late = 4 * time.Second
	m.part.Sever(late, unheardLinger)
	m.part.HoldRequests() // its retries and cleanup, until it gave up
	<-done
	pause(context.Background(), 200*time.Millisecond)
	m.part.Restore()
	pause(context.Background(), late+unheardLinger)
	m.severed(FaultLateRequest, "v0's enqueue, delivered after its caller gave up", start, n)
	pause(ctx, lateLinger)
}

// lostRelease: a holder of v0 releases with its reply lost; once the key
// is gone the connection is cut, and the release retries.
func (m *mech) lostRelease(ctx context.Context, rng *rand.Rand) {
	n := m.r.name("mutex", "v0")
	who := m.client() + ".rel"
	mu, l := m.lockOnce(ctx, n, who, 5*time.Second)
	if l == nil {
		return
	}
	defer mu.Close()
	m.r.holdBriefly(ctx, rng, who, n, l, 50*time.Millisecond)
	start := now()
	err := m.unanswered([]string{l.Key()}, true, func(ctx context.Context) error { return l.Unlock(ctx) })
	m.r.released(who, n, l, start, err)
	m.severed(FaultReplyLost, "v0's release", start, n)
}

// lostSetRelease: a Set of v0 and v1 releases with its reply lost.
func (m *mech) lostSetRelease(ctx context.Context, rng *rand.Rand) {
	who := m.client() + ".set"
	v0, v1 := m.r.name("mutex", "v0"), m.r.name("mutex", "v1")
	set, err := mutex.NewSet(m.cli, []string{v0.Name, v1.Name}, append(m.r.kindMetrics(), mutex.WithNamespace(m.r.cfg.Namespace), mutex.WithTTL(m.r.cfg.TTL), mutex.WithIdentity(who))...)
	if err != nil {
		return
	}
	defer set.Close()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	start := now()
	l, err := set.Lock(actx)
	ret := now()
	cancel()
	name := v0.Name + "+" + v1.Name
	op := Op{Client: who, Kind: "mutex.Set.Lock", Name: name, Call: start, Return: ret, Err: errString(err)}
	if err != nil {
		m.r.h.op(op)
		return
	}
	op.Token = int64(l.Token())
	m.r.h.op(op)
	for i, n := range []NameInfo{v0, v1} {
		x := &Hold{Prim: n.Prim, Name: n.Name, Client: who, Key: l.Keys()[i], Token: int64(l.Token()), Acquired: ret}
		m.r.h.acquired(x, n, l.Context().Done())
		context.AfterFunc(l.Context(), func() { m.r.h.ended(x, now(), errString(context.Cause(l.Context()))) })
	}
	pause(ctx, time.Duration(rng.IntN(50))*time.Millisecond)
	start = now()
	err = m.unanswered(l.Keys(), true, func(ctx context.Context) error { return l.Unlock(ctx) })
	m.r.h.op(m.r.leaseAfter(Op{Client: who, Kind: "mutex.Set.Release", Name: name, Call: start, Return: now(), Err: errString(err), Key: l.Keys()[0], Token: int64(l.Token())}))
	m.severed(FaultReplyLost, "the release of the Set v0+v1", start, v0, v1)
}

// lostHandOver: a leader of ev0 transfers to the candidate behind it with
// its reply lost: the replies are held back from the moment the term's
// hold ends for the hand-over (the HoldEnded hook), after the reads that
// plan it, just before its transaction.
func (m *mech) lostHandOver(ctx context.Context) {
	n := m.r.name("election", "ev0")
	var armed atomic.Pointer[string] // the term's key, once it leads
	hooks := &core.Hooks{HoldEnded: func(key string) {
		if k := armed.Load(); k != nil && *k == key {
			m.part.LoseReplies()
		}
	}}
	a, err := m.r.campaignHooked(ctx, m.cli, n, m.client()+".a", 10*time.Second, hooks)
	if err != nil {
		return
	}
	defer a.close()
	t := a.lead(ctx, 3*time.Second)
	if t == nil {
		return
	}
	b, err := m.r.campaign(ctx, m.cli, n, m.client()+".b", 10*time.Second)
	if err != nil {
		_ = t.Resign(context.Background())
		return
	}
	defer b.close()
	to := ""
	for _, c := range m.r.waitCandidates(ctx, a.e, 2) {
		if !c.Leader && c.Key != t.Key() {
			to = c.Key
		}
	}
	if to == "" {
		_ = t.Resign(context.Background())
		return
	}
	key := t.Key()
	armed.Store(&key)
	start := now()
	err = m.unanswered([]string{t.Key()}, false, func(ctx context.Context) error { return t.Transfer(ctx, to) })
	armed.Store(nil)
	m.r.h.op(m.r.leaseAfter(Op{Client: a.who, Kind: "election.Transfer", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: t.Key(), Token: int64(t.Token())}))
	m.severed(FaultReplyLost, "ev0's hand-over", start, n)
	if u := b.lead(ctx, 3*time.Second); u != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := now()
		m.r.released(b.who, n, u, start, u.Resign(rctx))
		cancel()
	}
}

// unanswered runs call (a release of keys) with its replies held back
// (from the start, or from when a hook of the caller's says so): once
// every key is gone (it applied) or 3 s passed, the connection is cut, so
// its reply is lost and it retries. It returns call's error.
func (m *mech) unanswered(keys []string, atOnce bool, call func(context.Context) error) error {
	if atOnce {
		m.part.LoseReplies()
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		done <- call(ctx)
	}()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && !m.r.gone(keys) {
		pause(context.Background(), 20*time.Millisecond)
	}
	m.part.Sever(0, unheardLinger)
	return <-done
}

// gone reports whether none of keys exists, by a read of the admin's.
func (r *runner) gone(keys []string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(k, clientv3.WithKeysOnly())
	}
	resp, err := r.admin.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return false
	}
	for _, rr := range resp.Responses {
		if len(rr.GetResponseRange().Kvs) > 0 {
			return false
		}
	}
	return true
}

// leaseAfter notes in o, a release told its key was gone ("not held",
// "not leader"), whether the key's lease still lived once it answered:
// the seconds it had left, or -1 when it was gone (expired or revoked: a
// deletion the call may truly not have made). The key names its lease.
func (r *runner) leaseAfter(o Op) Op {
	if !toldGone(o.Err) || o.Key == "" {
		return o
	}
	seg := o.Key[strings.LastIndexByte(o.Key, '/')+1:]
	if i := strings.IndexByte(seg, '.'); i >= 0 {
		seg = seg[:i]
	}
	id, err := strconv.ParseInt(seg, 16, 64)
	if err != nil {
		return o
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := r.admin.TimeToLive(ctx, clientv3.LeaseID(id))
	switch {
	case err != nil:
	case resp.TTL <= 0:
		o.LeaseLeft = -1
	default:
		o.LeaseLeft = resp.TTL
	}
	return o
}

// toldGone: an answer that the key was gone, of a release or a hand-over.
// A lease revoked under the call (its session closed beside it) is a
// truthful "not held", and another path.
func toldGone(err string) bool {
	return (strings.Contains(err, "not held") || strings.Contains(err, "not leader")) && !strings.Contains(err, "lease was revoked")
}

// callerOf is who a key's value or a call's client names, for telling
// whose calls could own a key: "w1" of "w1.l0" and "w1-5", "set" of
// "set.s3", "c1" of "c1-4"; "" for a value that names nobody (an etcd
// contender's).
func callerOf(s string) string {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i]
	}
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		return s[:i]
	}
	return s
}

// faultGrace is how long after a fault a client may still be recovering
// from it: a TTL and 2 s (a lease to expire, watches to resume), and a
// TTL and a second after a cut connection alone (reply-lost,
// late-request: a session's revoke cut off leaves its keys until its
// lease expires).
func faultGrace(kind string, ttl time.Duration) int64 {
	if kind == FaultReplyLost || kind == FaultLateRequest {
		return int64(ttl) + int64(time.Second)
	}
	return int64(ttl) + int64(2*time.Second)
}

// operatorFaults delete keys; they delay nobody's deletion.
var operatorFaults = []string{FaultAdminDelete, FaultAdminRevoke, FaultOperatorKeys, FaultOperatorCLI, FaultShardCrash}

// pastFaults returns deadline (due base after from, when caller's key
// appeared), or base after the end and grace of a fault or disturbance
// (not load) that could delay caller's deletion of that key, in progress
// from a grace before from until base after it, when later: the cluster's
// faults, and those of caller's own connection or process. A fault
// excuses what it delays until then, not for ever.
func (h *History) pastFaults(from, deadline int64, base, ttl time.Duration, caller string, prefixes ...string) int64 {
	until := from + int64(base)
	for _, f := range h.Faults {
		switch {
		case len(f.Keys) > 0 && !keysUnder(f.Keys, prefixes):
			continue
		case len(f.Clients) > 0 && !slices.ContainsFunc(f.Clients, func(c string) bool { return callerOf(c) == caller }):
			continue
		case len(f.Clients) == 0 && len(f.Keys) == 0 && slices.Contains(operatorFaults, f.Kind):
			continue
		}
		end := f.End
		if end == 0 {
			end = math.MaxInt64 / 4
		}
		if g := faultGrace(f.Kind, ttl); f.Start <= until && end+g >= from {
			deadline = max(deadline, end+g+int64(base))
		}
	}
	for _, d := range h.Disturbances {
		if !d.Load && d.Start <= until && d.End+int64(ttl) >= from {
			deadline = max(deadline, d.End+int64(ttl)+int64(base))
		}
	}
	return deadline
}

func keysUnder(keys, prefixes []string) bool {
	for _, k := range keys {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
	}
	return len(prefixes) == 0
}

// checkGivenUp checks that no contender key outlives every call that
// could own it. A key created while no acquisition of its caller on its
// name was in flight, and never returned to one, is a request that
// applied after its caller gave up on it: an enqueue whose reply was lost
// or which came late, past the fence that should void it. Nobody waits
// in it, and it stands in front of every waiter until its lease ends. It
// must go within the free-lock bound (the run's, freeDeadline), or that
// bound after the end of a fault near it and the fault's grace. Etcd's
// contenders (no value) and shard keys are not judged.
func checkGivenUp(h *History, cfg Config, rep *Report) {
	rep.Histories++
	base := cfg.FreeBound
	if base <= 0 {
		base = DefaultFreeBound
	}
	returned := map[incarnation]bool{}
	for _, x := range h.Holds {
		returned[incarnation{x.Key, x.Token}] = true
	}
	type span struct{ from, to int64 }
	calls := map[string][]span{} // caller \x00 name
	callers := map[string]bool{}
	for _, o := range h.Ops {
		if !isAcquisition(o.Kind) {
			continue
		}
		ret := o.Return
		if ret == 0 {
			ret = math.MaxInt64
		}
		c := callerOf(o.Client)
		callers[c] = true
		for _, nm := range strings.Split(o.Name, "+") {
			calls[c+"\x00"+nm] = append(calls[c+"\x00"+nm], span{o.Call, ret})
		}
	}
	end := h.Settled
	if end == 0 && len(h.Seen) > 0 {
		end = h.Seen[len(h.Seen)-1].At
	}
	for _, n := range h.Names {
		if n.Prim == "shard" {
			continue
		}
		_, deleted := replay(h.Events, n)
		for _, e := range h.Events {
			if e.Delete || e.Create != e.Rev || !isContender(n, e.Key) {
				continue
			}
			inc := incarnation{e.Key, e.Create}
			c := callerOf(e.Value)
			if returned[inc] || c == "" || !callers[c] || strings.HasPrefix(e.Value, TrafficEtcdctl+".") {
				continue
			}
			from, ok := h.seenAt(e.Rev)
			if !ok {
				continue
			}
			to, gone := end, int64(0)
			if d, ok := deleted[inc]; ok {
				gone = d
				if t, ok := h.seenAt(d); ok {
					to = t
				}
			}
			inFlight := false
			for _, s := range calls[c+"\x00"+n.Name] {
				if s.from <= to && s.to >= from {
					inFlight = true
					break
				}
			}
			if inFlight {
				continue
			}
			deadline, _, _ := h.freeDeadline(from, base)
			deadline = h.pastFaults(from, deadline, base, cfg.TTL, c, n.Prefix)
			rep.judged("given-up")
			if to <= deadline {
				continue
			}
			what := "never deleted"
			if gone != 0 {
				what = fmt.Sprintf("deleted at rev %d, %v after", gone, time.Duration(to-from).Round(time.Millisecond))
			}
			rep.add("given-up", fmt.Sprintf("%s %s: %s (token %d, by %q) was put at rev %d (seen at %s) while no acquisition of %s on %s was in flight, and no call ever returned it: a request that applied after its caller gave up on it; %s",
				n.Prim, n.Name, shortKey(e.Key), e.Create, trim(e.Value), e.Rev, since(h.Start, from), c, n.Name, what), e.Rev)
		}
	}
}

// leaseFaults are the faults of one client that can end its lease (cut
// off, its lease clock slow, its process stopped, its replies slow): near
// them a key may go from under a release without its holder hearing
// first.
var leaseFaults = []string{FaultBlackhole, FaultClockSkew, FaultFreeze, FaultSlowLink}

// checkToldTruly checks what a release, a Set's release or a hand-over
// told its caller when its key was gone: "not held" (or "not leader") is
// true only if something else deleted the key. It is a lie when the hold
// had not ended by a loss when the call began (its Context ended with the
// call's own cause: released, transferred), and nothing else could
// delete the key meanwhile: no operator's revision, no fault of its
// client's that can end its lease near the call, no Close of its session
// beside it, and its lease still there once it answered (Op.LeaseLeft;
// or the revision that deleted the key put a release mark: a release,
// not an expiry). Then the call's own write deleted it, in an attempt
// whose reply was lost. The cluster's faults do not excuse it: they fail requests,
// which is what a release must hear through.
func checkToldTruly(h *History, cfg Config, rep *Report) {
	rep.Histories++
	admin := adminRevs(h)
	deleted := map[incarnation]int64{}
	for _, n := range h.Names {
		_, ds := replay(h.Events, n)
		for k, v := range ds {
			deleted[k] = v
		}
	}
	type holdKey struct {
		client string
		token  int64
	}
	byToken := map[holdKey][]*Hold{}
	for _, x := range h.Holds {
		byToken[holdKey{x.Client, x.Token}] = append(byToken[holdKey{x.Client, x.Token}], x)
	}
	// A revision that put a release mark released a holder's key (or an
	// operator's forced hand-over did): no lease expired there.
	marked := map[int64]bool{}
	for _, e := range h.Events {
		if !e.Delete && keys.IsReleased(e.Key) {
			marked[e.Rev] = true
		}
	}
	var closes []Op
	for _, o := range h.Ops {
		if strings.HasPrefix(o.Kind, "session.Close") || strings.HasSuffix(o.Kind, ".Close") {
			closes = append(closes, o)
		}
	}
	for _, o := range h.Ops {
		released := strings.HasSuffix(o.Kind, ".Release") || strings.HasPrefix(o.Kind, "election.Transfer") || strings.HasPrefix(o.Kind, "election.Resign")
		if !released || o.Return == 0 || o.Token == 0 {
			continue
		}
		var holds []*Hold
		for _, x := range byToken[holdKey{o.Client, o.Token}] {
			if o.Key == "" || x.Key == o.Key {
				holds = append(holds, x)
			}
		}
		if len(holds) == 0 {
			continue
		}
		own := true // every hold ended by this call, not by a loss before it
		for _, x := range holds {
			own = own && (strings.Contains(x.Cause, "released") || strings.Contains(x.Cause, "transferred")) && !x.Child
		}
		if !own {
			continue
		}
		rep.judged("told-truly")
		if !toldGone(o.Err) {
			continue
		}
		caller := callerOf(o.Client)
		near := false
		for _, f := range h.Faults {
			if e := f.End; slices.Contains(leaseFaults, f.Kind) && slices.ContainsFunc(f.Clients, func(c string) bool { return callerOf(c) == caller }) &&
				f.Start <= o.Return && (e == 0 || e+int64(cfg.TTL) >= o.Call) {
				near = true
			}
		}
		for _, c := range closes {
			if callerOf(c.Client) == caller && c.Call <= o.Return && (c.Return == 0 || c.Return >= o.Call) {
				near = true
			}
		}
		var revs []string
		var d int64
		expired := o.LeaseLeft <= 0 // its lease gone, or not known, after the answer
		for _, x := range holds {
			r, ok := deleted[incarnation{x.Key, x.Token}]
			if !ok || admin[r] {
				near = true
			}
			if marked[r] {
				expired = false // a release's revision, not an expiry's
			}
			d = max(d, r)
			revs = append(revs, fmt.Sprintf("%s at rev %d", shortKey(x.Key), r))
		}
		switch {
		case near:
			rep.judged("told-truly: not judged (a fault of its client or a Close near)")
			continue
		case expired:
			// A loaded machine's renewals can fail for a TTL, and the
			// lease expire under a release: a true "not held".
			rep.judged("told-truly: not judged (its lease gone: it may have expired)")
			continue
		}
		rep.add("told-truly", fmt.Sprintf("%s %s: %s's call at %s was told %q, but nothing else deleted its keys (%s): its own write did, unheard",
			o.Kind, o.Name, o.Client, since(h.Start, o.Call), trim(o.Err), strings.Join(revs, ", ")), d)
	}
}
