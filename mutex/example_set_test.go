package mutex_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/batonhq/baton/mutex"
)

// A transfer holds both accounts under one token: one transaction takes
// every name or none, so two transfers in opposite directions cannot
// deadlock, whatever order they name the accounts in.
func ExampleNewSet() {
	cli := connect()
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	set, err := mutex.NewSet(cli, []string{"account-a", "account-b"})
	if err != nil {
		log.Fatal(err)
	}
	defer set.Close()
	lock, err := set.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())

	other, _ := mutex.New(cli, "account-b")
	defer other.Close()
	_, err = other.TryLock(ctx)
	fmt.Println("account-b alone while the transfer holds it:", err)
	fmt.Println("names held under one token:", len(lock.Keys()))
	// Output:
	// account-b alone while the transfer holds it: mutex: locked by another holder: "account-b"
	// names held under one token: 2
}
