package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/mutex"
)

func connect() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	return cli
}

func ExampleMutex_Lock() {
	cli := connect()
	defer cli.Close()

	m, err := mutex.New(cli, "nightly-report", mutex.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := m.Lock(ctx) // ctx bounds the wait only
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())

	// Work under lock.Context(): it ends before the lease can expire.
	select {
	case <-lock.Done():
		fmt.Println("lost:", context.Cause(lock.Context()))
	default:
		fmt.Println("holding", m.Name(), "with a fencing token:", lock.Token() > 0)
	}
	// Output: holding nightly-report with a fencing token: true
}

func ExampleMutex_TryLock() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	a, _ := mutex.New(cli, "migration")
	defer a.Close()
	b, _ := mutex.New(cli, "migration")
	defer b.Close()

	held, err := a.TryLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := b.TryLock(ctx); errors.Is(err, mutex.ErrLocked) {
		fmt.Println("b: someone else is migrating")
	}
	_ = held.Unlock(ctx)
	if l, err := b.TryLock(ctx); err == nil {
		fmt.Println("b: migrating")
		_ = l.Unlock(ctx)
	}
	// Output:
	// b: someone else is migrating
	// b: migrating
}

func ExampleDo() {
	cli := connect()
	defer cli.Close()

	err := mutex.Do(context.Background(), cli, "payments-batch", func(ctx context.Context, t fencing.Token) error {
		// ctx ends if the lock may be lost; t goes with every write.
		fmt.Println("running the batch under a token:", t > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// running the batch under a token: true
	// err: <nil>
}

// A fenced write to etcd itself: the transaction applies only while the
// lock is held, so a holder that was paused past its lease writes nothing.
func ExampleLock_Txn() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()

	m, _ := mutex.New(cli, "ledger")
	defer m.Close()
	lock, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := lock.Txn(ctx).Then(clientv3.OpPut("/ledger/balance", "100")).Commit()
	fmt.Println("written:", err == nil && resp.Succeeded)

	// An operator deletes the lock (or the lease expires while we are paused).
	_, _ = cli.Delete(ctx, lock.Key())
	_, err = lock.Txn(ctx).Then(clientv3.OpPut("/ledger/balance", "0")).Commit()
	fmt.Println("stale write refused:", errors.Is(err, mutex.ErrNotHeld))
	<-lock.Done()
	fmt.Println("cause:", errors.Is(context.Cause(lock.Context()), mutex.ErrKeyGone))
	// Unlock tells a deleted key from a revoked lease.
	fmt.Println("unlock:", errors.Is(lock.Unlock(ctx), mutex.ErrKeyDeleted))
	// Output:
	// written: true
	// stale write refused: true
	// cause: true
	// unlock: true
}

// A resource that is not etcd checks the token with a fencing.Guard.
func ExampleLock_Token() {
	cli := connect()
	defer cli.Close()
	ctx := context.Background()
	guard := fencing.NewMemoryGuard()

	m, _ := mutex.New(cli, "report-store")
	defer m.Close()
	first, _ := m.Lock(ctx)
	old := first.Token()
	_ = first.Unlock(ctx)
	second, _ := m.Lock(ctx)
	defer second.Unlock(ctx)

	fmt.Println("new holder:", guard.Admit(ctx, "reports", second.Token()))
	err := guard.Admit(ctx, "reports", old)
	var stale *fencing.StaleError
	fmt.Println("old holder rejected:", errors.As(err, &stale) && stale.Token == old)
	// Output:
	// new holder: <nil>
	// old holder rejected: true
}
