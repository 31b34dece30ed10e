package router_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/router"
)

func ExampleParse() {
	r, err := router.Parse([]byte(`
default: jobs-etcd
clusters:
  - name: payments-etcd
    endpoints: [10.0.1.1:2379, 10.0.1.2:2379, 10.0.1.3:2379]
    namespaces: [payments, ledger]
  - name: jobs-etcd
    endpoints: [10.0.2.1:2379]
    namespaces: [jobs]
`))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close() // no connection is open until Client asks for one
	for _, ns := range []string{"payments", "jobs", "reports"} {
		c, _ := r.Cluster(ns)
		fmt.Printf("%s → %s\n", ns, c.Name)
	}
	// Output:
	// payments → payments-etcd
	// jobs → jobs-etcd
	// reports → jobs-etcd
}

func ExampleParse_problems() {
	_, err := router.Parse([]byte(`
clusters:
  - name: a
    endpoints: [10.0.1.1:2379]
    namespaces: [payments]
  - name: b
    endpoint: [10.0.2.1:2379]
    namespaces: [payments]
`))
	fmt.Println(err)
	// Output:
	// router: invalid cluster map: clusters[1].endpoint: unknown field (known: [name endpoints tls credentials epoch namespaces id revision])
	// router: invalid cluster map: clusters[1].endpoints: at least one endpoint is needed
	// router: invalid cluster map: clusters[1].namespaces[0]: namespace "payments" is also served by clusters[0] ("a"): a namespace is served by one cluster
}

func ExampleRouter_Client() {
	// Two clusters: payments' locks on a, jobs' on b.
	r, err := router.New(router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: srvA.Endpoints(), Namespaces: []string{"payments"}},
		{Name: "b", Endpoints: srvB.Endpoints(), Namespaces: []string{"jobs"}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cli, err := r.Client(ctx, "payments") // shared; r.Close closes it
	if err != nil {
		log.Fatal(err)
	}
	m, err := mutex.New(cli, "settle", mutex.WithNamespace("payments"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	lock, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())

	// Hand the resource a token that carries the cluster's epoch, so that
	// it keeps increasing if payments ever moves to a newer cluster.
	tok, err := r.Token("payments", lock.Token())
	if err != nil {
		log.Fatal(err)
	}
	c, _ := r.Cluster("payments")
	fmt.Println("payments is locked on cluster", c.Name, "with token", tok == lock.Token())
	// Output: payments is locked on cluster a with token true
}

func ExampleCheckMove() {
	before := router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: []string{"10.0.1.1:2379"}, Epoch: 1, Namespaces: []string{"payments", "jobs"}},
		{Name: "b", Endpoints: []string{"10.0.2.1:2379"}, Epoch: 1},
	}}
	after := router.Map{Clusters: []router.Cluster{
		{Name: "a", Endpoints: []string{"10.0.1.1:2379"}, Epoch: 1, Namespaces: []string{"payments"}},
		{Name: "b", Endpoints: []string{"10.0.2.1:2379"}, Epoch: 1, Namespaces: []string{"jobs"}},
	}}
	fmt.Println(router.CheckMove(before, after))
	after.Clusters[1].Epoch = 2
	fmt.Println(router.CheckMove(before, after))
	// Output:
	// router: epochs do not order the move: namespace "jobs" moves from cluster "a" (epoch 1) to cluster "b" (epoch 1): the new epoch must be greater than 1
	// <nil>
}

func ExampleToken() {
	old, _ := router.Token(1, 90210) // acquired on the old cluster, epoch 1
	cur, _ := router.Token(2, 17)    // on the new cluster, epoch 2: revisions restart low
	fmt.Println(cur > old)
	epoch, rev := router.SplitToken(cur)
	fmt.Println(epoch, rev)
	// Output:
	// true
	// 2 17
}

func ExampleIdentify() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Pin cluster a (what baton clusters pin writes in the map).
	probe, err := router.New(router.Map{Clusters: []router.Cluster{{Name: "a", Endpoints: srvA.Endpoints()}}})
	if err != nil {
		log.Fatal(err)
	}
	defer probe.Close()
	cli, err := probe.ClusterClient(ctx, "a")
	if err != nil {
		log.Fatal(err)
	}
	id, err := router.Identify(ctx, cli)
	if err != nil {
		log.Fatal(err)
	}

	// The name main, pinned to a, repointed at b's endpoints: refused
	// before any client is handed out.
	r, err := router.New(router.Map{Clusters: []router.Cluster{{Name: "main", Endpoints: srvB.Endpoints(),
		ID: id.String(), Revision: id.Revision, Namespaces: []string{"payments"}}}})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	_, err = r.Client(ctx, "payments")
	fmt.Println(errors.Is(err, router.ErrIdentity))
	// Output: true
}
