package request_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
)

// srv is the package's member. Auth is on (secure): every test runs as
// the users of policy, root only to look.
var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

// policy: in namespace rq, a holder and a waiter that only contend, a job
// that may request, an operator and an observer; the holder also contends
// in rqother, where nobody else may write.
const policy = `
namespaces:
  - name: rq
    contenders: [rq-holder, rq-waiter]
    requesters: [rq-job]
    operators: [rq-lead]
    observers: [rq-watch]
  - name: rqother
    contenders: [rq-holder]
`

const password = "pw-for-tests"

var (
	secureOnce sync.Once
	secureErr  error
)

// secure makes the users with a password, applies policy and turns auth
// on, once for the package.
func secure(t *testing.T) {
	t.Helper()
	secureOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cli, err := srv.NewClient(srv.Endpoints()...)
		if err != nil {
			secureErr = err
			return
		}
		defer cli.Close()
		p, err := rbac.Parse([]byte(policy))
		if err != nil {
			secureErr = err
			return
		}
		// Users made first, with a password; Apply makes the others
		// without one.
		for _, u := range []string{"rq-holder", "rq-waiter", "rq-job", "rq-lead", "rq-watch"} {
			if _, err := cli.UserAdd(ctx, u, password); err != nil {
				secureErr = err
				return
			}
		}
		if _, err := rbac.Apply(ctx, cli, p); err != nil {
			secureErr = err
			return
		}
		_, secureErr = rbac.EnableAuth(ctx, cli, password)
	})
	if secureErr != nil {
		t.Fatalf("secure the member: %v", secureErr)
	}
}

// clients are the test's clients by user: each authentication costs a
// bcrypt of the password on the server.
var clients = map[*testing.T]map[string]*clientv3.Client{}

// as is a client authenticated as user, one per test and user.
func as(t *testing.T, user string) *clientv3.Client {
	t.Helper()
	secure(t)
	if cli := clients[t][user]; cli != nil {
		return cli
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: user, Password: password,
	})
	if err != nil {
		t.Fatalf("client as %s: %v", user, err)
	}
	if clients[t] == nil {
		clients[t] = map[string]*clientv3.Client{}
		t.Cleanup(func() { delete(clients, t) })
	}
	clients[t][user] = cli
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// count is the number of keys under prefix, read as root.
func count(t *testing.T, ctx context.Context, prefix string) int64 {
	t.Helper()
	g, err := as(t, "root").Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return g.Count
}

// hold locks name in namespace rq as rq-holder.
func hold(t *testing.T, ctx context.Context, name string) *mutex.Lock {
	t.Helper()
	m, err := mutex.New(as(t, "rq-holder"), name, mutex.WithNamespace("rq"), mutex.WithIdentity("holder-1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	return l
}

// TestRequesterAsksAndTheHolderIsTold: a user listed under requesters
// may ask a holder to let go; the holder sees the request, and its audit
// record lies under the request records of the trail, naming the user as
// etcd authenticated it.
func TestRequesterAsksAndTheHolderIsTold(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	l := hold(t, ctx, "nightly")
	ch := l.ReleaseRequested()
	if err := mutex.RequestRelease(ctx, as(t, "rq-job"), "nightly", "deploy at 10:00", mutex.WithNamespace("rq"), mutex.WithIdentity("job-7")); err != nil {
		t.Fatalf("a requester's request: %v", err)
	}
	var r request.Request
	select {
	case r = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told")
	}
	if r.Reason != "deploy at 10:00" || r.By != "rq-job (job-7)" || r.Key != l.Key() || r.Token != int64(l.Token()) {
		t.Fatalf("request %+v to holder %s token %d", r, l.Key(), l.Token())
	}
	if !strings.HasPrefix(r.Audit, rbac.RequestAuditPrefix("rq")) {
		t.Fatalf("audit record at %s, want it under %s", r.Audit, rbac.RequestAuditPrefix("rq"))
	}
	g, err := as(t, "rq-watch").Get(ctx, r.Audit)
	if err != nil || len(g.Kvs) != 1 {
		t.Fatalf("an observer reads the audit record %s: %v %v", r.Audit, g, err)
	}
	var rec struct {
		Action   string `json:"action"`
		Name     string `json:"name"`
		Identity string `json:"etcd_identity"`
		Source   string `json:"etcd_identity_source"`
		Reason   string `json:"reason"`
	}
	if err := json.Unmarshal(g.Kvs[0].Value, &rec); err != nil || rec.Action != "request-release" || rec.Name != "nightly" ||
		rec.Identity != "rq-job" || rec.Source != "user" || rec.Reason != "deploy at 10:00" {
		t.Fatalf("audit record %s: %+v %v", g.Kvs[0].Value, rec, err)
	}
	// A request to a leader goes the same way.
	e, err := election.New(as(t, "rq-holder"), "sched", election.WithNamespace("rq"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	term, err := e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = term.Resign(context.Background()) }()
	tch := term.ReleaseRequested()
	if err := election.RequestRelease(ctx, as(t, "rq-job"), "sched", "move to host-b", election.WithNamespace("rq")); err != nil {
		t.Fatalf("a requester's request to a leader: %v", err)
	}
	select {
	case r := <-tch:
		if !strings.HasPrefix(r.Audit, rbac.RequestAuditPrefix("rq")) {
			t.Fatalf("leader request audited at %s", r.Audit)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader was not told")
	}
}

// TestRequesterCannotForceNorTouchTheTrail: the request role writes the
// request records and nothing else of the audit trail, so it can neither
// force-unlock (delete the holder's key with a record of the force) nor
// forge or erase another record. A plain contender and an observer may
// not request at all; a refused request writes nothing.
func TestRequesterCannotForceNorTouchTheTrail(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	l := hold(t, ctx, "report")
	root := as(t, "root")
	if _, err := root.Put(ctx, rbac.AuditPrefix("rq")+"20260101T000000.000000000Z-1", `{"action":"force-unlock"}`); err != nil {
		t.Fatal(err)
	}
	auditBefore := count(t, ctx, rbac.AuditPrefix("rq"))
	job := as(t, "rq-job")
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s: err = %v, want permission denied", what, err)
		}
	}
	// The force-unlock's transaction: delete the holder's key and write
	// its record in the trail.
	_, err := job.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(l.Key()), "=", int64(l.Token()))).
		Then(clientv3.OpDelete(l.Key()), clientv3.OpPut(rbac.AuditPrefix("rq")+"20260101T000001.000000000Z-2", `{"action":"force-unlock"}`)).Commit()
	denied("a requester's force-unlock", err)
	_, err = job.Put(ctx, rbac.AuditPrefix("rq")+"forged", `{"action":"force-unlock"}`)
	denied("a requester's record outside the request records", err)
	_, err = job.Delete(ctx, rbac.AuditPrefix("rq"), clientv3.WithPrefix())
	denied("a requester's erasure of the trail", err)
	_, err = job.Delete(ctx, rbac.AuditPrefix("rq")+"20260101T000000.000000000Z-1")
	denied("a requester's delete of a force-unlock record", err)

	for _, user := range []string{"rq-waiter", "rq-watch"} {
		err := mutex.RequestRelease(ctx, as(t, user), "report", "mine now", mutex.WithNamespace("rq"))
		denied(user+"'s request", err)
	}
	if n := count(t, ctx, rbac.AuditPrefix("rq")); n != auditBefore {
		t.Errorf("%d audit records after the refusals, %d before", n, auditBefore)
	}
	if n := count(t, ctx, request.Key("rq", keys.Lock, "report", int64(l.Token()))); n != 0 {
		t.Errorf("a refused request left its key")
	}
	if g, err := root.Get(ctx, l.Key()); err != nil || len(g.Kvs) != 1 || g.Kvs[0].CreateRevision != int64(l.Token()) || l.Context().Err() != nil {
		t.Fatalf("the holder lost the lock to a refused force: %v %v", g, err)
	}
}

// TestRequestToALeaseWithKeysOfAnotherNamespace: the request key goes on
// the holder's lease, and etcd lets a user put on a lease only if it may
// write every key already there; a holder whose lease also carries a key
// of a namespace the requester may not write cannot be asked by it, and
// nothing is written.
func TestRequestToALeaseWithKeysOfAnotherNamespace(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	l := hold(t, ctx, "shared-lease")
	if _, err := as(t, "rq-holder").Put(ctx, "/rqother/v1/marker", "x", clientv3.WithLease(l.Lease())); err != nil {
		t.Fatal(err)
	}
	before := count(t, ctx, rbac.AuditPrefix("rq"))
	err := mutex.RequestRelease(ctx, as(t, "rq-job"), "shared-lease", "r", mutex.WithNamespace("rq"))
	if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("request to a lease with a key of rqother: %v, want permission denied", err)
	}
	if n := count(t, ctx, rbac.AuditPrefix("rq")); n != before {
		t.Fatalf("the refused request wrote an audit record")
	}
	if n := count(t, ctx, request.Key("rq", keys.Lock, "shared-lease", int64(l.Token()))); n != 0 {
		t.Fatalf("the refused request left its key")
	}
}
