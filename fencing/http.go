package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header is the HTTP request header that carries a fencing token, in
// decimal.
const Header = "Fencing-Token"

// SetHeader sets the Fencing-Token header of req to t.
func SetHeader(req *http.Request, t Token) { req.Header.Set(Header, t.String()) }

// Transport is an http.RoundTripper that sets the Fencing-Token header of
// every request to Token(), e.g. a *mutex.Lock's Token method, leaving the
// caller's request untouched as RoundTrippers must. When the request's
// context carries a trace (such as a hold's Context) and the request no
// trace headers, it adds them (W3C traceparent, or the application's
// propagator), so that the resource's check joins the holder's trace.
type Transport struct {
	// Token returns the token to send; it must not be nil.
	Token func() Token
	// Base sends the request; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip sends a clone of req with the header set.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	SetHeader(r, t.Token())
	if trace.SpanContextFromContext(r.Context()).IsValid() {
		p := propagator()
		if !hasAny(r.Header, p.Fields()) {
			p.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
		}
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// Rejection is the JSON body of the middleware's 400, 409 and 503
// answers. Token and Highest are set on a 409.
type Rejection struct {
	Error    string `json:"error"`
	Resource string `json:"resource,omitempty"`
	Token    Token  `json:"token,omitempty"`
	Highest  Token  `json:"highest,omitempty"`
}

// Middleware returns HTTP middleware that admits the request's
// Fencing-Token for the resource named by resource(r) through g before
// calling the next handler. It answers, with a JSON Rejection body:
//
//   - 400 Bad Request when the header is missing or malformed, or when
//     resource returns an error;
//   - 409 Conflict when g rejects the token as stale;
//   - 503 Service Unavailable when g fails otherwise (say, etcd is
//     unreachable): the write may be retried.
//
// The admitted token and resource are in the next handler's request
// context (TokenFromContext). So is the caller's trace context, read from
// the request's headers (W3C traceparent, or the application's
// propagator) unless the request's context already carries a span (from
// tracing middleware of the application's): g's check, and so a rejected
// zombie write, shows in the trace of the request that carried it. Admission orders requests, but a handler
// still running when a newer token is admitted can complete its write; to
// close that window, have the handler check the token again in the same
// transaction as its write (SQLGuard.Admit, EtcdGuard.Write).
func Middleware(g Guard, resource func(*http.Request) (string, error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !trace.SpanContextFromContext(r.Context()).IsValid() {
				if ctx := propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)); trace.SpanContextFromContext(ctx).IsValid() {
					r = r.WithContext(ctx)
				}
			}
			name, err := resource(r)
			if err != nil {
				reject(w, http.StatusBadRequest, Rejection{Error: "resource: " + err.Error()})
				return
			}
			raw := r.Header.Get(Header)
			if raw == "" {
				reject(w, http.StatusBadRequest, Rejection{Error: "missing " + Header + " header", Resource: name})
				return
			}
			t, err := ParseToken(raw)
			if err != nil {
				reject(w, http.StatusBadRequest, Rejection{Error: err.Error(), Resource: name})
				return
			}
			if err := g.Admit(r.Context(), name, t); err != nil {
				var stale *StaleError
				switch {
				case errors.As(err, &stale):
					reject(w, http.StatusConflict, Rejection{Error: ErrStale.Error(), Resource: name, Token: t, Highest: stale.Highest})
				case errors.Is(err, ErrMalformed):
					reject(w, http.StatusBadRequest, Rejection{Error: err.Error(), Resource: name})
				default:
					reject(w, http.StatusServiceUnavailable, Rejection{Error: err.Error(), Resource: name})
				}
				return
			}
			ctx := context.WithValue(r.Context(), admittedKey{}, admitted{resource: name, token: t})
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// hasAny reports whether h has any of the headers names.
func hasAny(h http.Header, names []string) bool {
	for _, n := range names {
		if h.Get(n) != "" {
			return true
		}
	}
	return false
}

type admittedKey struct{}

type admitted struct {
	resource string
	token    Token
}

// TokenFromContext returns the token and resource that Middleware
// admitted for the request whose context is ctx; ok is false outside it.
func TokenFromContext(ctx context.Context) (t Token, resource string, ok bool) {
	a, ok := ctx.Value(admittedKey{}).(admitted)
	return a.token, a.resource, ok
}

func reject(w http.ResponseWriter, code int, body Rejection) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
