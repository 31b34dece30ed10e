package rwmutex_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/rwmutex"
)

func connect() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	return cli
}

func ExampleRWMutex_RLock() {
	cli := connect()
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	readers, err := rwmutex.New(cli, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	defer readers.Close()
	rebuilder, _ := rwmutex.New(cli, "catalog")
	defer rebuilder.Close()

	r1, _ := readers.RLock(ctx)
	r2, _ := readers.RLock(ctx) // readers share
	_, err = rebuilder.TryLock(ctx)
	fmt.Println("writer while read:", errors.Is(err, rwmutex.ErrLocked))
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)

	w, err := rebuilder.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer after the readers, token above theirs:", w.Token() > r2.Token())
	_ = w.Unlock(ctx)
	// Output:
	// writer while read: true
	// writer after the readers, token above theirs: true
}
