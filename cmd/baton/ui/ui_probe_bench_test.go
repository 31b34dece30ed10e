package ui_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/internal/keys"
)

// BenchmarkUILivenessProbe compares the two ways baton ui could learn that
// etcd still answers: the linearizable read it uses (a ReadIndex round
// trip through the leader) and a watch progress request on the watch it
// already has (answered by the member alone). Both on the package's
// embedded etcd, in the same run; compare ns/op and allocs/op:
//
//	go test -run '^$' -bench UILivenessProbe -benchmem ./cmd/baton/cli
func BenchmarkUILivenessProbe(b *testing.B) {
	cli, err := clitest.Srv.NewClient()
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	prefix := keys.NamespacePrefix("ui-probe-bench")

	b.Run("linearizable-read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cli.Get(ctx, prefix, clientv3.WithCountOnly()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("serializable-read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cli.Get(ctx, prefix, clientv3.WithCountOnly(), clientv3.WithSerializable()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("watch-progress-request", func(b *testing.B) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wch := cli.Watch(wctx, prefix, clientv3.WithPrefix())
		if err := cli.RequestProgress(wctx); err != nil {
			b.Fatal(err)
		}
		<-wch // the watch is set up
		b.ReportAllocs()
		for b.Loop() {
			if err := cli.RequestProgress(wctx); err != nil {
				b.Fatal(err)
			}
			for wr := range wch {
				if wr.IsProgressNotify() {
					break
				}
			}
		}
	})
}
