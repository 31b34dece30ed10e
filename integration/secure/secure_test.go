package secure_test

import (
	"context"
	"crypto/tls"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
)

func newMutex(t *testing.T, cli *clientv3.Client, ns, name string, opts ...mutex.Option) *mutex.Mutex {
	t.Helper()
	m, err := mutex.New(cli, name, append([]mutex.Option{mutex.WithNamespace(ns)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func newElection(t *testing.T, cli *clientv3.Client, ns, name string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(cli, name, append([]election.Option{election.WithNamespace(ns)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// keysUnder lists the keys under prefix, read as root.
func keysUnder(t *testing.T, prefix string) []string {
	t.Helper()
	resp, err := clientOf(t, "root").Get(testCtx(t), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func TestContenderLocksCampaignsRenewsAndReleasesInItsNamespace(t *testing.T) {
	ctx := testCtx(t)
	cli := clientOf(t, payApp)

	// Lock, hold through several renewals, write under the lock, unlock.
	m := newMutex(t, cli, "payments", "settlement", mutex.WithTTL(2*time.Second))
	lock, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("contender Lock: %v", err)
	}
	if lock.Token() <= 0 {
		t.Fatalf("token %v", lock.Token())
	}
	// The validity deadline is TTL − margin after the last acknowledged
	// renewal: a lock still valid after 1.5 TTLs was renewed.
	select {
	case <-lock.Done():
		t.Fatalf("lock lost while held: %v", context.Cause(lock.Context()))
	case <-time.After(3 * time.Second):
	}
	ttl, err := cli.TimeToLive(ctx, lock.Lease())
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("lease after renewals: %+v, %v", ttl, err)
	}
	resp, err := lock.Txn(ctx).Then(clientv3.OpPut("/payments/v1/data/balance", "42")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("fenced write: %+v, %v", resp, err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if !errors.Is(context.Cause(lock.Context()), mutex.ErrReleased) {
		t.Fatalf("cause after Unlock: %v", context.Cause(lock.Context()))
	}
	again, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if again.Token() <= lock.Token() {
		t.Fatalf("token went from %v to %v", lock.Token(), again.Token())
	}
	if err := again.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Campaign, proclaim, read, resign.
	e := newElection(t, cli, "payments", "ledger-writer", election.WithTTL(2*time.Second))
	term, err := e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatalf("contender Campaign: %v", err)
	}
	if err := term.Proclaim(ctx, "host-a:v2"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	leader, err := e.Leader(ctx)
	if err != nil || leader.Value != "host-a:v2" || leader.Token != term.Token() {
		t.Fatalf("Leader = %+v, %v", leader, err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader after Resign: %v", err)
	}

	// The password user contends as well.
	pw, err := dial(certTLS(gateway), pwUser, pwPass)
	if err != nil {
		t.Fatalf("password user: %v", err)
	}
	defer pw.Close()
	if err := mutex.Do(ctx, pw, "settlement", func(context.Context, fencing.Token) error { return nil }, mutex.WithNamespace("payments")); err != nil {
		t.Fatalf("password user's Do: %v", err)
	}

	// Closing releases everything: no key of the contender is left.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if left := keysUnder(t, "/payments/v1/lock/settlement/"); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}
	if left := keysUnder(t, "/payments/v1/election/ledger-writer/"); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}
}

func TestContenderCannotReadOrWriteAnotherNamespace(t *testing.T) {
	ctx := testCtx(t)
	pay := clientOf(t, payApp)

	// jobs-app holds a lock and leads in jobs.
	jobs := clientOf(t, jobsApp)
	jl, err := newMutex(t, jobs, "jobs", "nightly").Lock(ctx)
	if err != nil {
		t.Fatalf("jobs contender Lock: %v", err)
	}
	jt, err := newElection(t, jobs, "jobs", "scheduler").Campaign(ctx, "jobs-1")
	if err != nil {
		t.Fatalf("jobs contender Campaign: %v", err)
	}

	m := newMutex(t, pay, "jobs", "nightly")
	if _, err := m.TryLock(ctx); !isDenied(err) {
		t.Errorf("TryLock in jobs: err = %v, want permission denied", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := newMutex(t, pay, "jobs", "other").Lock(lctx); !isDenied(err) {
		t.Errorf("Lock in jobs: err = %v, want permission denied", err)
	}
	if _, err := m.Holder(ctx); !isDenied(err) {
		t.Errorf("Holder in jobs: err = %v, want permission denied", err)
	}
	if _, err := mutex.List(ctx, pay, mutex.WithNamespace("jobs")); !isDenied(err) {
		t.Errorf("List of jobs: err = %v, want permission denied", err)
	}
	e := newElection(t, pay, "jobs", "scheduler")
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if _, err := e.Campaign(cctx, "intruder"); !isDenied(err) {
		t.Errorf("Campaign in jobs: err = %v, want permission denied", err)
	}
	if _, err := e.Leader(ctx); !isDenied(err) {
		t.Errorf("Leader in jobs: err = %v, want permission denied", err)
	}
	if _, err := e.Candidates(ctx); !isDenied(err) {
		t.Errorf("Candidates in jobs: err = %v, want permission denied", err)
	}
	for name, op := range map[string]clientv3.Op{
		"get":    clientv3.OpGet("/jobs/v1/", clientv3.WithPrefix()),
		"put":    clientv3.OpPut("/jobs/v1/lock/nightly/1", "x"),
		"delete": clientv3.OpDelete(jl.Key()),
	} {
		if _, err := pay.Do(ctx, op); !isDenied(err) {
			t.Errorf("raw %s in jobs: err = %v, want permission denied", name, err)
		}
	}
	// Nor outside any namespace.
	if _, err := pay.Put(ctx, "/elsewhere", "x"); !isDenied(err) {
		t.Errorf("put outside namespaces: err = %v", err)
	}
	// Watching jobs is refused too.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	wr := <-pay.Watch(wctx, "/jobs/v1/", clientv3.WithPrefix())
	if !isWatchDenied(wr.Err()) {
		t.Errorf("watch of jobs: %v, want permission denied", wr.Err())
	}
	// Nor can it end jobs-app's lease.
	if _, err := pay.Revoke(ctx, jl.Lease()); !isDenied(err) {
		t.Errorf("revoke of jobs' lease: err = %v, want permission denied", err)
	}

	// jobs-app still holds, and the failed attempts left no key behind.
	if jl.Context().Err() != nil || jt.Context().Err() != nil {
		t.Fatalf("jobs holder disturbed: %v / %v", context.Cause(jl.Context()), context.Cause(jt.Context()))
	}
	// The lock's key, the leader's key and its candidate record.
	if got := keysUnder(t, "/jobs/v1/"); len(got) != 3 || !strings.HasPrefix(got[0], "/jobs/v1/candidate/") {
		t.Fatalf("keys in jobs: %v, want the holder's three", got)
	}
}

func TestObserverReadsButCannotContendOrForceUnlock(t *testing.T) {
	ctx := testCtx(t)
	pay := clientOf(t, payApp)
	ops := clientOf(t, payOps)

	lock, err := newMutex(t, pay, "payments", "refunds").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	contender := newElection(t, pay, "payments", "primary")
	term, err := contender.Campaign(ctx, "pay-1")
	if err != nil {
		t.Fatal(err)
	}

	// Reading: holder, waiters, listing, leader, candidates, observe.
	om := newMutex(t, ops, "payments", "refunds")
	h, err := om.Holder(ctx)
	if err != nil || h.Key != lock.Key() || h.TTL <= 0 {
		t.Fatalf("observer Holder = %+v, %v", h, err)
	}
	if _, err := om.Waiters(ctx); err != nil {
		t.Fatalf("observer Waiters: %v", err)
	}
	infos, err := mutex.List(ctx, ops, mutex.WithNamespace("payments"))
	if err != nil {
		t.Fatalf("observer List: %v", err)
	}
	found := false
	for _, in := range infos {
		found = found || in.Name == "refunds" && in.Holder.Key == lock.Key()
	}
	if !found {
		t.Fatalf("observer List misses the held lock: %+v", infos)
	}
	oe := newElection(t, ops, "payments", "primary")
	leader, err := oe.Leader(ctx)
	if err != nil || leader.Key != term.Key() {
		t.Fatalf("observer Leader = %+v, %v", leader, err)
	}
	cands, err := oe.Candidates(ctx)
	if err != nil || len(cands) != 1 || cands[0].TTL <= 0 {
		t.Fatalf("observer Candidates = %+v, %v", cands, err)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	states := oe.Observe(octx)
	if first := <-states; first.Key != term.Key() {
		t.Fatalf("Observe first state %+v, want the leader", first)
	}

	// Contending is refused.
	if _, err := om.TryLock(ctx); !isDenied(err) {
		t.Errorf("observer TryLock: err = %v, want permission denied", err)
	}
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	if _, err := newMutex(t, ops, "payments", "free-lock").Lock(lctx); !isDenied(err) {
		t.Errorf("observer Lock: err = %v, want permission denied", err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if _, err := newElection(t, ops, "payments", "other").Campaign(cctx, "ops"); !isDenied(err) {
		t.Errorf("observer Campaign: err = %v, want permission denied", err)
	}
	// Force-unlocking, by deleting the holder's key or revoking its lease,
	// is refused, and so is renewing someone's lease.
	if _, err := ops.Delete(ctx, lock.Key()); !isDenied(err) {
		t.Errorf("observer delete of the holder's key: err = %v, want permission denied", err)
	}
	if _, err := ops.Revoke(ctx, lock.Lease()); !isDenied(err) {
		t.Errorf("observer revoke of the holder's lease: err = %v, want permission denied", err)
	}
	if _, err := ops.KeepAliveOnce(ctx, term.Lease()); !isDenied(err) {
		t.Errorf("observer keepalive of the leader's lease: err = %v, want permission denied", err)
	}
	if lock.Context().Err() != nil || term.Context().Err() != nil {
		t.Fatalf("holder disturbed by the observer: %v / %v", context.Cause(lock.Context()), context.Cause(term.Context()))
	}

	// Observe follows the contender's resignation.
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-states:
		if !s.IsZero() {
			t.Fatalf("Observe after Resign: %+v, want no leader", s)
		}
	case <-ctx.Done():
		t.Fatal("Observe did not report the resignation")
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if left := keysUnder(t, "/payments/v1/lock/free-lock/"); len(left) != 0 {
		t.Fatalf("refused Lock left keys: %v", left)
	}
}

// TestLeaseRenewAndRevokeNeedWriteOnEveryKey shows what etcd asks of a
// lease's renewal and revocation: write permission on every key attached
// to it. A contender's own lease, with keys only in its namespace, is
// fine; a lease that also has a key elsewhere is not.
func TestLeaseRenewAndRevokeNeedWriteOnEveryKey(t *testing.T) {
	ctx := testCtx(t)
	pay := clientOf(t, payApp)
	root := clientOf(t, "root")

	own, err := pay.Grant(ctx, 10)
	if err != nil {
		t.Fatalf("contender Grant: %v", err)
	}
	if _, err := pay.Put(ctx, "/payments/v1/lock/raw/1", "x", clientv3.WithLease(own.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := pay.KeepAliveOnce(ctx, own.ID); err != nil {
		t.Fatalf("renewal of own lease: %v", err)
	}
	if _, err := pay.Revoke(ctx, own.ID); err != nil {
		t.Fatalf("revoke of own lease: %v", err)
	}
	if left := keysUnder(t, "/payments/v1/lock/raw/"); len(left) != 0 {
		t.Fatalf("revoke left %v", left)
	}

	mixed, err := root.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Revoke(context.Background(), mixed.ID)
	for _, k := range []string{"/payments/v1/lock/mixed/1", "/jobs/v1/lock/mixed/1"} {
		if _, err := root.Put(ctx, k, "x", clientv3.WithLease(mixed.ID)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pay.KeepAliveOnce(ctx, mixed.ID); !isDenied(err) {
		t.Errorf("renewal of a lease with a key in jobs: err = %v, want permission denied", err)
	}
	if _, err := pay.Revoke(ctx, mixed.ID); !isDenied(err) {
		t.Errorf("revoke of a lease with a key in jobs: err = %v, want permission denied", err)
	}
	// Nor may it attach its own key to that lease.
	if _, err := pay.Put(ctx, "/payments/v1/lock/mixed/2", "x", clientv3.WithLease(mixed.ID)); !isDenied(err) {
		t.Errorf("put on a lease with a key in jobs: err = %v, want permission denied", err)
	}
	// TimeToLive without keys needs no permission: that is what lets an
	// observer show the time left of a holder's lease.
	if ttl, err := clientOf(t, payOps).TimeToLive(ctx, mixed.ID); err != nil || ttl.TTL <= 0 {
		t.Errorf("observer TimeToLive: %+v, %v", ttl, err)
	}
}

func TestRefusedClientsGetClearErrors(t *testing.T) {
	expiredFiles := rbac.ClientFiles(pki, "expired")
	if _, err := expiredFiles.ClientConfig(); !errors.Is(err, rbac.ErrCertificate) || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("ClientConfig of an expired certificate: %v", err)
	}
	// Past the client-side check, to see the server refuse it.
	expiredCfg := certTLS(payApp).Clone()
	pair, err := tls.LoadX509KeyPair(expiredFiles.Cert, expiredFiles.Key)
	if err != nil {
		t.Fatal(err)
	}
	expiredCfg.Certificates = []tls.Certificate{pair}

	foreignCfg, err := rbac.TLSFiles{CA: rbac.ClientFiles(pki, payApp).CA, Cert: rbac.ClientFiles(foreign, payApp).Cert, Key: rbac.ClientFiles(foreign, payApp).Key}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := rbac.TLSFiles{CA: rbac.ClientFiles(pki, payApp).CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	distrust, err := rbac.TLSFiles{CA: rbac.ClientFiles(foreign, payApp).CA, Cert: rbac.ClientFiles(pki, payApp).Cert, Key: rbac.ClientFiles(pki, payApp).Key}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		cfg      *tls.Config
		user, pw string
		// wantIs is the error etcd's client returns; TLS refusals surface
		// there only as the call's deadline, so for them probe is what
		// rbac.ProbeTLS must say.
		wantIs error
		probe  string
	}{
		{name: "no certificate", cfg: noCert, wantIs: context.DeadlineExceeded, probe: "the server requires a client certificate"},
		{name: "certificate of another CA", cfg: foreignCfg, wantIs: context.DeadlineExceeded, probe: "the server does not trust the CA that signed the client certificate"},
		{name: "expired certificate", cfg: expiredCfg, wantIs: context.DeadlineExceeded, probe: "the server finds the client certificate expired"},
		{name: "server of another CA", cfg: distrust, wantIs: context.DeadlineExceeded, probe: "the server's certificate is not signed by the CA this client trusts"},
		{name: "wrong password", cfg: certTLS(gateway), user: pwUser, pw: "wrong", wantIs: rpctypes.ErrAuthFailed},
		{name: "unknown user", cfg: certTLS(gateway), user: "nobody", pw: "x", wantIs: rpctypes.ErrAuthFailed},
		{name: "certificate of no etcd user", cfg: certTLS(gateway), wantIs: rpctypes.ErrPermissionDenied},
		{name: "user with no role", cfg: certTLS("ed-user"), wantIs: rpctypes.ErrPermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err := tryGet(ctx, tc.cfg, tc.user, tc.pw)
			if !errors.Is(err, tc.wantIs) {
				t.Fatalf("err = %v, want %v", err, tc.wantIs)
			}
			pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer pcancel()
			perr := rbac.ProbeTLS(pctx, srv.Endpoint(), tc.cfg)
			if tc.probe == "" {
				if perr != nil {
					t.Fatalf("ProbeTLS of an accepted TLS session: %v", perr)
				}
				return
			}
			if !errors.Is(perr, rbac.ErrTLSRefused) || !strings.Contains(perr.Error(), tc.probe) {
				t.Fatalf("ProbeTLS = %v, want ErrTLSRefused saying %q", perr, tc.probe)
			}
			t.Logf("client: %v; ProbeTLS: %v", err, perr)
		})
	}
}

// tryGet dials and reads one namespace key; it returns the first error.
func tryGet(ctx context.Context, cfg *tls.Config, user, pw string) error {
	cli, err := dial(cfg, user, pw)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Get(ctx, "/payments/v1/", clientv3.WithPrefix())
	return err
}

func TestApplyAndEnableAuthTwiceChangeNothing(t *testing.T) {
	ctx := testCtx(t)
	root := clientOf(t, "root")
	changes, err := rbac.Apply(ctx, root, policy)
	if err != nil || changes != nil {
		t.Fatalf("Apply again = %v, %v; want no change", changes, err)
	}
	changes, err = rbac.EnableAuth(ctx, root, "")
	if err != nil || changes != nil {
		t.Fatalf("EnableAuth again = %v, %v; want no change", changes, err)
	}
	shown, err := rbac.Show(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	want := rbac.Policy{Namespaces: []rbac.Namespace{
		{Name: "jobs", Contenders: []string{jobsApp}},
		{Name: "payments", Contenders: []string{payApp, pwUser}, Observers: []string{payOps}},
	}}
	if !reflect.DeepEqual(shown, want) {
		t.Fatalf("Show = %+v, want %+v", shown, want)
	}
	// Managing auth needs root: a contender cannot apply a policy.
	if _, err := rbac.Apply(ctx, clientOf(t, payApp), policy); !isDenied(err) {
		t.Fatalf("Apply as a contender: err = %v, want permission denied", err)
	}
}

// TestRevokedRoleEndsTheHold shows the bound on what a revoked user keeps:
// its next renewal is refused, and its lock's Context ends, well before
// the lease could expire.
func TestRevokedRoleEndsTheHold(t *testing.T) {
	ctx := testCtx(t)
	root := clientOf(t, "root")
	wider := rbac.Policy{Namespaces: append([]rbac.Namespace{{Name: "temporary", Contenders: []string{tempApp}}}, policy.Namespaces...)}
	if _, err := rbac.Apply(ctx, root, wider); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Back to the package's policy, the temporary namespace pruned.
		if _, err := rbac.Apply(context.Background(), root, policy, rbac.WithPrune()); err != nil {
			t.Errorf("restore policy: %v", err)
		}
	})
	ttl := 3 * time.Second
	lock, err := newMutex(t, clientOf(t, tempApp), "temporary", "job", mutex.WithTTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	changes, err := rbac.Apply(ctx, root, policy, rbac.WithPrune())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"delete-role baton:temporary:operate",
		"delete-role baton:temporary:read",
		"revoke-role baton:temporary:readwrite from user " + tempApp,
		"delete-role baton:temporary:readwrite",
		"delete-role baton:temporary:request",
	}
	if got := changeStrings(changes); !reflect.DeepEqual(got, want) {
		t.Fatalf("prune changes %v, want %v", got, want)
	}
	select {
	case <-lock.Done():
	case <-time.After(ttl):
		t.Fatalf("lock still held %v after its role was revoked", ttl)
	}
	if cause := context.Cause(lock.Context()); !errors.Is(cause, mutex.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	t.Logf("hold ended %v after the revocation: %v", time.Since(revoked).Round(time.Millisecond), context.Cause(lock.Context()))
}

func changeStrings(cs []rbac.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}
