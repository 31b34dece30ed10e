package mutex_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// TestSetContextEndsWithItsMembers: a Set's Context has ended in the step
// that ends any member's hold Context (the HoldEnded hook runs there), so
// before another client can see a member's key deleted: on Unlock, and on
// an operator's delete of one member's key.
func TestSetContextEndsWithItsMembers(t *testing.T) {
	for _, end := range []string{"unlock", "admin delete"} {
		t.Run(end, func(t *testing.T) {
			cli, other := client(t), client(t)
			ctx := etcdtest.Context(t, 20*time.Second)
			var held atomic.Pointer[mutex.Lock]
			var live, ended atomic.Int64 // member ends seen with the Set's Context live, and in all
			hooks := &core.Hooks{HoldEnded: func(key string) {
				if l := held.Load(); l != nil && slices.Contains(l.Keys(), key) {
					ended.Add(1)
					if l.Context().Err() == nil {
						live.Add(1)
					}
				}
			}}
			sess, err := bsession.New(cli, bsession.WithTTL(5*time.Second), config.Hooks(hooks))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sess.Close() })
			s := newSet(t, cli, []string{"ends-a", "ends-b", "ends-c"}, mutex.WithSession(sess))
			l, err := s.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held.Store(l)
			member := l.Keys()[1]
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			wch := other.Watch(wctx, member, clientv3.WithRev(int64(l.Token())))
			seen := make(chan error, 1) // the Set's Context's error when the deletion was seen
			go func() {
				for resp := range wch {
					for _, ev := range resp.Events {
						if ev.Type == mvccpb.DELETE {
							seen <- l.Context().Err()
							return
						}
					}
				}
				close(seen)
			}()
			switch end {
			case "unlock":
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			default:
				if _, err := other.Delete(ctx, member); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err, ok := <-seen:
				if !ok {
					t.Fatal("the watch ended before the deletion")
				}
				if err == nil {
					t.Error("another client saw a member's key deleted before the Set's Context ended")
				}
			case <-ctx.Done():
				t.Fatal("the deletion was not seen")
			}
			<-l.Done()
			if n := ended.Load(); n == 0 {
				t.Fatal("no member's hold ended")
			}
			if n := live.Load(); n != 0 {
				t.Errorf("%d of %d member holds ended with the Set's Context still live", n, ended.Load())
			}
		})
	}
}
