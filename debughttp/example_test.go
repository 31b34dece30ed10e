package debughttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/batonhq/baton/debughttp"
	"github.com/batonhq/baton/mutex"
)

// A service mounts the handler on its admin mux; each GET lists what the
// process holds.
func ExampleHandler() {
	ctx := context.Background()
	cli, _ := srv.NewClient() // an etcd client
	defer cli.Close()
	m, _ := mutex.New(cli, "nightly-report", mutex.WithNamespace("example-debug"))
	defer m.Close()

	mux := http.NewServeMux()
	mux.Handle("/debug/baton", debughttp.Handler(debughttp.From(m.Held)))

	lock, _ := m.Lock(ctx)
	defer lock.Unlock(ctx)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/baton", nil))
	var s debughttp.Snapshot
	_ = json.Unmarshal(rec.Body.Bytes(), &s)
	h := s.Held[0]
	fmt.Println(rec.Code, h.Kind, h.Namespace, h.Name, h.Token == lock.Token(), h.Valid)
	// Output:
	// 200 lock example-debug nightly-report true true
}
