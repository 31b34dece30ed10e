package chaos_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
)

// resource is the protected resource of the scenarios: an HTTP service
// in the test process behind fencing.Middleware and an in-memory guard,
// which logs every write it was sent, admitted or not.
type resource struct {
	srv   *httptest.Server
	guard *fencing.MemoryGuard

	mu  sync.Mutex
	log []resWrite
}

type resWrite struct {
	Token  fencing.Token
	Label  string
	Status int
	At     time.Time
}

func newResource(t *testing.T) *resource {
	t.Helper()
	r := &resource{guard: fencing.NewMemoryGuard()}
	admit := fencing.Middleware(r.guard, func(req *http.Request) (string, error) {
		return strings.TrimPrefix(req.URL.Path, "/"), nil
	})
	inner := admit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		tok, _ := fencing.ParseToken(req.Header.Get(fencing.Header))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		// The log and the admission are one step, so the log's order is
		// the guard's.
		r.mu.Lock()
		defer r.mu.Unlock()
		inner.ServeHTTP(sw, req)
		r.log = append(r.log, resWrite{Token: tok, Label: string(body), Status: sw.status, At: time.Now()})
	}))
	t.Cleanup(r.srv.Close)
	return r
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// URL is the address of the resource named name.
func (r *resource) URL(name string) string { return r.srv.URL + "/" + name }

// writes returns the log.
func (r *resource) writes() []resWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]resWrite(nil), r.log...)
}

// postWrite sends a write with token to url and returns the HTTP status.
func postWrite(ctx context.Context, client *http.Client, url string, token fencing.Token, label string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(label))
	if err != nil {
		return 0, err
	}
	fencing.SetHeader(req, token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// checkNoneAfter fails the test if, after the first admitted write with
// token from, any write with a lower token was admitted.
func checkNoneAfter(t *testing.T, log []resWrite, from fencing.Token) {
	t.Helper()
	seen := false
	for _, w := range log {
		if w.Status != http.StatusOK {
			continue
		}
		if w.Token == from {
			seen = true
		}
		if seen && w.Token < from {
			t.Errorf("write %q with token %d admitted after token %d's first write", w.Label, w.Token, from)
		}
	}
	if !seen {
		t.Errorf("no write with token %d was admitted", from)
	}
}

// tokenHolder is a fencing.Holder without ownership: its Txn is a plain
// transaction, so EtcdGuard.Write fences by token alone, as a durable
// register that knows nothing of locks would.
type tokenHolder struct {
	cli   *clientv3.Client
	token fencing.Token
}

func (h tokenHolder) Token() fencing.Token                 { return h.token }
func (h tokenHolder) Txn(ctx context.Context) clientv3.Txn { return h.cli.Txn(ctx) }

func describe(status int, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("status %d", status)
}
