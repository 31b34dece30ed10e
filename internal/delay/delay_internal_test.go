package delay

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/internal/keys"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) {
	s, err := etcdtest.New(etcdtest.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

// The conversion of a lost holder's record into a marker, retried after
// its first attempt applied but its reply was lost, must find the marker
// its own: else the marker's lease is revoked and the delay vanishes.
func TestPlaceRetriedAfterALostReplyKeepsTheMarker(t *testing.T) {
	ctx := context.Background()
	cli := srv.Client(t)
	c := New(cli, "delay-test", keys.Lock, "m", keys.Prefix("delay-test", keys.Lock, "m"), 3*time.Second)
	holder := keys.Prefix("delay-test", keys.Lock, "m") + "abc"
	if _, err := cli.Put(ctx, c.RecordKey(holder, 2), `{"key":"x"}`); err != nil {
		t.Fatal(err)
	}
	g, err := cli.Get(ctx, c.RecordKey(holder, 2))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	kv, marker := g.Kvs[0], c.markerKey(Record{Key: holder, Token: 2})
	for attempt := 1; attempt <= 2; attempt++ { // the first one's reply "lost"
		ours, err := c.place(ctx, kv, marker, []byte(`{}`), lease.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !ours {
			t.Fatalf("attempt %d: the marker placed by the first attempt is not seen as ours: its lease would be revoked", attempt)
		}
	}
	// Another contender's attempt, on its own lease, is not ours.
	other, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ours, err := c.place(ctx, kv, marker, []byte(`{}`), other.ID); err != nil || ours {
		t.Fatalf("another lease's conversion after ours: ours = %v, %v; want false", ours, err)
	}
	_, _ = cli.Delete(ctx, "/delay-test/", clientv3.WithPrefix())
}
