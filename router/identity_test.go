package router_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/router"
)

func identify(t *testing.T, cli *clientv3.Client) router.Identity {
	t.Helper()
	id, err := router.Identify(etcdtest.Context(t, 10*time.Second), cli)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// composed takes and releases "ledger" in namespace payments through r n
// times and returns the composed tokens.
func composed(t *testing.T, r *router.Router, n int) []fencing.Token {
	t.Helper()
	ctx := etcdtest.Context(t, 20*time.Second)
	cli, err := r.Client(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	m, err := mutex.New(cli, "ledger", mutex.WithNamespace("payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var out []fencing.Token
	for range n {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := r.Token("payments", l.Token())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// admitAll feeds a guard every token, in order: each must be admitted.
func admitAll(t *testing.T, g *fencing.MemoryGuard, what string, toks []fencing.Token) {
	t.Helper()
	for _, tok := range toks {
		if err := g.Admit(context.Background(), "ledger", tok); err != nil {
			t.Fatalf("%s: token %d (epoch %d) refused: %v", what, tok, tok>>router.RevisionBits, err)
		}
	}
}

// The proof of a move that cannot go back in time: the name "main" is
// repointed from cluster A (whose revisions are far ahead) to a freshly
// built B. The router refuses B until the map pins it, check-move refuses
// until its epoch is raised, and then every token issued after the move is
// greater than every token issued before it. Then payments is removed and
// re-added: a lower epoch is refused, a greater one orders after all.
func TestRepointedNameIsRefusedUntilItsEpochMoves(t *testing.T) {
	a := etcdtest.Start(t, etcdtest.Config{Name: "main-a"})
	b := etcdtest.Start(t, etcdtest.Config{Name: "main-b"})
	ctx := etcdtest.Context(t, 60*time.Second)
	ac := a.Client(t)
	for i := range 50 {
		if _, err := ac.Put(ctx, fmt.Sprintf("/other/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	idA, idB := identify(t, ac), identify(t, b.Client(t))
	if idA.ClusterID == idB.ClusterID {
		t.Fatalf("precondition: two fresh clusters share the ID %s", idA)
	}
	mainOn := func(s *etcdtest.Server, id router.Identity, epoch uint16) router.Map {
		c := router.Cluster{Name: "main", Endpoints: s.Endpoints(), Epoch: epoch, Namespaces: []string{"payments"}}
		if id.ClusterID != 0 {
			c.ID, c.Revision = id.String(), id.Revision
		}
		return router.Map{Clusters: []router.Cluster{c}}
	}
	onA := mainOn(a, idA, 1)
	before := composed(t, newRouter(t, onA), 3)

	// The operator changes the endpoints only: the pin still says A.
	repointed := onA
	repointed.Clusters = []router.Cluster{onA.Clusters[0]}
	repointed.Clusters[0].Endpoints = b.Endpoints()
	r := newRouter(t, repointed)
	_, err := r.Client(ctx, "payments")
	if !errors.Is(err, router.ErrIdentity) || !strings.Contains(err.Error(), `cluster "main"`) ||
		!strings.Contains(err.Error(), idB.String()) || !strings.Contains(err.Error(), idA.String()) {
		t.Fatalf("repointed name: Client = %v, want ErrIdentity naming main, %s and %s", err, idB, idA)
	}
	if _, err := r.ClusterClient(ctx, "main"); !errors.Is(err, router.ErrIdentity) {
		t.Fatalf("repointed name: ClusterClient = %v, want ErrIdentity", err)
	}
	// Dropping the pin is refused by check-move.
	unpinned := mainOn(b, router.Identity{}, 1)
	if err := router.CheckMove(onA, unpinned); !errors.Is(err, router.ErrEpochOrder) || !strings.Contains(err.Error(), "no longer pins") {
		t.Fatalf("CheckMove with the pin dropped = %v", err)
	}
	// Pinned to B at the same epoch: the router connects, check-move refuses.
	sameEpoch := mainOn(b, idB, 1)
	if err := router.CheckMove(onA, sameEpoch); !errors.Is(err, router.ErrEpochOrder) ||
		!strings.Contains(err.Error(), `the name "main" now means another etcd cluster`) {
		t.Fatalf("CheckMove to B at the same epoch = %v", err)
	}

	// Fixed: B pinned at epoch 2.
	onB := mainOn(b, idB, 2)
	if err := router.CheckMove(onA, onB); err != nil {
		t.Fatal(err)
	}
	after := composed(t, newRouter(t, onB), 3)
	guard := fencing.NewMemoryGuard()
	admitAll(t, guard, "before the move", before)
	admitAll(t, guard, "after the move", after)
	if err := guard.Admit(ctx, "ledger", before[len(before)-1]); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("a holder from before the move: Admit = %v, want ErrStale", err)
	}

	// Removed, then re-added on A at a lower epoch: refused; above: ordered.
	removed := router.Map{Clusters: []router.Cluster{{Name: "spare", Endpoints: a.Endpoints(), ID: idA.String()}},
		Retired: []router.Retired{{Namespace: "payments", Cluster: "main", ID: idB.String(), Epoch: 2}}}
	if err := router.CheckMove(onB, removed); err != nil {
		t.Fatal(err)
	}
	lower := mainOn(a, idA, 1)
	if err := router.CheckMove(removed, lower); !errors.Is(err, router.ErrEpochOrder) || !strings.Contains(err.Error(), `namespace "payments" moves from retired from cluster "main" (epoch 2`) {
		t.Fatalf("re-added at a lower epoch: CheckMove = %v", err)
	}
	readded := mainOn(a, idA, 3)
	if err := router.CheckMove(removed, readded); err != nil {
		t.Fatal(err)
	}
	again := composed(t, newRouter(t, readded), 3)
	admitAll(t, guard, "after the re-add", again)
}

// A cluster rebuilt with the same configuration has the same ID; its
// revision restarting low gives it away.
func TestClusterBelowItsPinnedRevisionIsRefused(t *testing.T) {
	s := etcdtest.Start(t, etcdtest.Config{Name: "rebuilt"})
	id := identify(t, s.Client(t))
	m := router.Map{Clusters: []router.Cluster{{Name: "main", Endpoints: s.Endpoints(), ID: id.String(),
		Revision: id.Revision + 1000, Namespaces: []string{"payments"}}}}
	r := newRouter(t, m)
	_, err := r.Client(etcdtest.Context(t, 10*time.Second), "payments")
	if !errors.Is(err, router.ErrIdentity) || !strings.Contains(err.Error(), "below the") {
		t.Fatalf("Client = %v, want ErrIdentity for a revision below the pin", err)
	}
}

// Without a pin, a client holds to the first etcd cluster it met.
func TestUnpinnedClientHoldsToTheFirstClusterItMeets(t *testing.T) {
	c := router.Cluster{Name: "mixed", Endpoints: []string{srvA.Endpoint(), srvB.Endpoint()}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second,
		DialOptions: c.DialOptions(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := etcdtest.Context(t, 10*time.Second)
	if _, err := cli.Get(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	// Identify visits every endpoint: the other one answers as another cluster.
	if _, err := router.Identify(ctx, cli); !errors.Is(err, router.ErrIdentity) {
		t.Fatalf("Identify over the endpoints of two clusters = %v, want ErrIdentity", err)
	}
}

// A member that did not answer when the connection opened, and answers
// later as another etcd cluster, is refused on streams too: a watch (or a
// lease keep-alive) that the balancer sends to it delivers nothing from it.
func TestAStreamToAnotherClusterIsRefused(t *testing.T) {
	a := etcdtest.Start(t, etcdtest.Config{Name: "stream-a"})
	late, err := etcdtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t, 60*time.Second)
	pin := identify(t, a.Client(t))
	m := router.Map{Clusters: []router.Cluster{{
		Name: "main", Endpoints: []string{a.Endpoint(), "http://" + late}, Namespaces: []string{"payments"},
		ID: pin.String(), Revision: pin.Revision,
	}}}
	r := newRouter(t, m, router.WithDialTimeout(time.Second))
	cli, err := r.Client(ctx, "payments")
	if err != nil {
		t.Fatalf("Client with one member of two answering: %v", err)
	}
	b := etcdtest.Start(t, etcdtest.Config{Name: "stream-b", ClientAddr: late})
	other := identify(t, b.Client(t))
	if other.ClusterID == pin.ClusterID {
		t.Fatal("the two clusters have one ID")
	}
	// The balancer reaches b once its subconnection is ready: a unary
	// call to it is refused.
	for i := 0; ; i++ {
		_, err := cli.Get(ctx, "k")
		if errors.Is(err, router.ErrIdentity) {
			break
		}
		if err != nil && ctx.Err() != nil || i == 300 {
			t.Fatalf("no unary call reached the late member as another cluster: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	refused := 0
	for i := range 12 {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wctx = metadata.AppendToOutgoingContext(wctx, "baton-test-stream", strconv.Itoa(i)) // its own stream
		wch := cli.Watch(wctx, "k", clientv3.WithCreatedNotify())
		select {
		case resp, ok := <-wch:
			if ok && resp.Err() == nil && resp.Header.ClusterId != pin.ClusterID {
				cancel()
				t.Fatalf("watch %d delivered a response of etcd cluster %s (the map pins %s)", i, router.FormatClusterID(resp.Header.ClusterId), pin)
			}
			if !ok || resp.Err() != nil {
				refused++
				if ok && !errors.Is(resp.Err(), router.ErrIdentity) {
					t.Errorf("watch %d ended with %v, want ErrIdentity", i, resp.Err())
				}
			}
		case <-time.After(10 * time.Second):
			cancel()
			t.Fatalf("watch %d: no answer", i)
		}
		cancel()
	}
	if refused == 0 {
		t.Fatal("no watch reached the late member: the test proves nothing")
	}
}
