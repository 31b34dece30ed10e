package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/mutex"
)

// A lock holder writes to etcd: the write commits only while it holds the
// lock and no higher token has been admitted for the resource.
func ExampleEtcdGuard_Write() {
	ctx := context.Background()
	cli, _ := srv.NewClient() // an etcd client
	defer cli.Close()

	m, _ := mutex.New(cli, "nightly-report", mutex.WithNamespace("example-write"))
	defer m.Close()
	lock, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(ctx)

	guard, _ := fencing.NewEtcdGuard(cli, fencing.WithNamespace("example-write"))
	defer cli.Delete(ctx, guard.Key("reports/2026-11-29")) // leave no mark behind
	_, err = guard.Write(ctx, lock, "reports/2026-11-29", clientv3.OpPut("/reports/2026-11-29", "done"))
	fmt.Println("write:", err)

	// A later holder's token was admitted meanwhile: this holder is stale.
	_ = guard.Admit(ctx, "reports/2026-11-29", lock.Token()+1)
	_, err = guard.Write(ctx, lock, "reports/2026-11-29", clientv3.OpPut("/reports/2026-11-29", "again"))
	fmt.Println("stale:", errors.Is(err, fencing.ErrStale))
	// Output:
	// write: <nil>
	// stale: true
}

// A service that is not etcd checks tokens it receives against marks kept
// in etcd, shared by all its replicas.
func ExampleEtcdGuard_Admit() {
	ctx := context.Background()
	cli, _ := srv.NewClient()
	defer cli.Close()
	guard, _ := fencing.NewEtcdGuard(cli, fencing.WithNamespace("example-admit"))
	defer cli.Delete(ctx, guard.Key("invoices")) // leave no mark behind

	fmt.Println(guard.Admit(ctx, "invoices", 1207))
	fmt.Println(guard.Admit(ctx, "invoices", 1207)) // the same holder again
	fmt.Println(guard.Admit(ctx, "invoices", 1100))
	// Output:
	// <nil>
	// <nil>
	// fencing: stale token 1100 for resource "invoices": highest admitted is 1207
}

// A service guards its write endpoints; the client sends its lock's token
// in the Fencing-Token header.
func ExampleMiddleware() {
	guard := fencing.NewMemoryGuard() // or an EtcdGuard shared by replicas
	resource := func(r *http.Request) (string, error) { return strings.TrimPrefix(r.URL.Path, "/"), nil }
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "written") })
	api := httptest.NewServer(fencing.Middleware(guard, resource)(write))
	defer api.Close()

	send := func(t fencing.Token) {
		client := &http.Client{Transport: &fencing.Transport{Token: func() fencing.Token { return t }}}
		resp, err := client.Post(api.URL+"/jobs/17", "text/plain", nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	send(9)
	send(8)
	// Output:
	// 200 written
	// 409 {"error":"fencing: stale token","resource":"jobs/17","token":8,"highest":9}
}
