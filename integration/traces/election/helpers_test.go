package election_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
)

func newElection(t *testing.T, cli *clientv3.Client, name string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(cli, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func preferred(t *testing.T, cli *clientv3.Client, name string, opts ...election.Option) *election.Election {
	t.Helper()
	return newElection(t, cli, name, append([]election.Option{election.WithStrategy(election.Preferred), election.WithTTL(5 * time.Second)}, opts...)...)
}
