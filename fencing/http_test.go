package fencing_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/fencing"
)

// byPath names the resource after the request path: PUT /accounts/7
// protects "accounts/7".
func byPath(r *http.Request) (string, error) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	if name == "" {
		return "", errors.New("no resource in the path")
	}
	return name, nil
}

// echoToken answers 200 with the token and resource the middleware admitted.
var echoToken = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	t, res, ok := fencing.TokenFromContext(r.Context())
	if !ok {
		http.Error(w, "no admitted token in context", http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "%s %d", res, t)
})

func TestMiddlewareAnswers(t *testing.T) {
	g := newEtcdGuard(t, fencing.WithNamespace(freshNS("http-mw")))
	srvHTTP := httptest.NewServer(fencing.Middleware(g, byPath)(echoToken))
	t.Cleanup(srvHTTP.Close)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := g.Admit(ctx, "accounts/7", 40); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		path   string
		header string // "-" means none
		code   int
		want   fencing.Rejection // for non-200 answers
		body   string            // for 200 answers
	}{
		{"admitted equal", "/accounts/7", "40", 200, fencing.Rejection{}, "accounts/7 40"},
		{"admitted higher", "/accounts/7", " 41 ", 200, fencing.Rejection{}, "accounts/7 41"},
		{"stale", "/accounts/7", "39", 409, fencing.Rejection{Error: "fencing: stale token", Resource: "accounts/7", Token: 39, Highest: 41}, ""},
		{"missing", "/accounts/7", "-", 400, fencing.Rejection{Error: "missing Fencing-Token header", Resource: "accounts/7"}, ""},
		{"empty", "/accounts/7", "", 400, fencing.Rejection{Error: "missing Fencing-Token header", Resource: "accounts/7"}, ""},
		{"zero", "/accounts/7", "0", 400, fencing.Rejection{Error: `fencing: malformed token: "0" is the zero token`, Resource: "accounts/7"}, ""},
		{"negative", "/accounts/7", "-3", 400, fencing.Rejection{Error: `fencing: malformed token: "-3" has a sign`, Resource: "accounts/7"}, ""},
		{"text", "/accounts/7", "abc", 400, fencing.Rejection{Error: `fencing: malformed token: "abc" is not a decimal int64`, Resource: "accounts/7"}, ""},
		{"no resource", "/", "41", 400, fencing.Rejection{Error: "resource: no resource in the path"}, ""},
		{"other resource", "/accounts/8", "1", 200, fencing.Rejection{}, "accounts/8 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, srvHTTP.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "-" {
				req.Header.Set(fencing.Header, tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.code)
			}
			if tc.code == 200 {
				if string(body) != tc.body {
					t.Fatalf("body %q, want %q", body, tc.body)
				}
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q, want application/json", ct)
			}
			var got fencing.Rejection
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if got != tc.want {
				t.Fatalf("body %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMiddlewareAnswers503WhenTheGuardFails(t *testing.T) {
	cli, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	g, err := fencing.NewEtcdGuard(cli)
	if err != nil {
		t.Fatal(err)
	}
	_ = cli.Close() // the guard can no longer reach etcd
	h := fencing.Middleware(g, byPath)(echoToken)
	req := httptest.NewRequest(http.MethodPut, "/accounts/1", nil)
	req.Header.Set(fencing.Header, "5")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d (%s), want 503", rec.Code, rec.Body)
	}
}

func TestTransportSetsTheHeaderOnAClone(t *testing.T) {
	g := fencing.NewMemoryGuard()
	srvHTTP := httptest.NewServer(fencing.Middleware(g, byPath)(echoToken))
	t.Cleanup(srvHTTP.Close)
	tok := fencing.Token(77)
	client := &http.Client{Transport: &fencing.Transport{Token: func() fencing.Token { return tok }}}
	req, err := http.NewRequestWithContext(ctxTimeout(t, 10*time.Second), http.MethodPost, srvHTTP.URL+"/jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "jobs 77" {
		t.Fatalf("status %d body %q, want 200 \"jobs 77\"", resp.StatusCode, body)
	}
	if req.Header.Get(fencing.Header) != "" {
		t.Fatal("Transport modified the caller's request")
	}

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	fencing.SetHeader(r, 12)
	if got := r.Header.Get("Fencing-Token"); got != "12" {
		t.Fatalf("SetHeader wrote %q, want 12", got)
	}
	srvHTTP.CloseClientConnections()
}
