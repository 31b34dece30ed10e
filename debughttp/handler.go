package debughttp

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
)

// Hold is one held lock or leadership: *mutex.Lock and *election.Term.
type Hold interface {
	Key() string
	Token() fencing.Token
	Lease() clientv3.LeaseID
	TTL() time.Duration
	Acquired() time.Time
	Deadline() time.Time
	Context() context.Context
}

// valuer is a Hold with a value, such as an election's Term.
type valuer interface{ Value() string }

// Source lists holds when asked.
type Source func() []Hold

// From adapts a method value that lists holds, such as m.Held of a
// *mutex.Mutex or e.Held of an *election.Election, to a Source.
func From[H Hold](held func() []H) Source {
	return func() []Hold {
		hs := held()
		out := make([]Hold, len(hs))
		for i, h := range hs {
			out[i] = h
		}
		return out
	}
}

// Entry is one hold as served.
type Entry struct {
	// Kind is "lock" or "election", Namespace and Name the lock's or
	// election's, all read from Key.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	// Value is an election's value, empty for a lock.
	Value string        `json:"value,omitempty"`
	Token fencing.Token `json:"token"`
	// Lease is the lease ID in hex, as etcdctl prints it.
	Lease string `json:"lease"`
	// TTLSeconds is the TTL the server granted the lease.
	TTLSeconds float64 `json:"ttl_seconds"`
	// TTLLeftSeconds is the time until the validity deadline, at which the
	// holder's Context ends unless a renewal is acknowledged first; zero
	// once past it.
	TTLLeftSeconds float64   `json:"ttl_left_seconds"`
	HeldSeconds    float64   `json:"held_seconds"`
	Acquired       time.Time `json:"acquired"`
	Deadline       time.Time `json:"deadline"`
	// Valid is false once the holder's Context has ended; Ended then
	// says why.
	Valid bool   `json:"valid"`
	Ended string `json:"ended,omitempty"`
}

// Snapshot is the handler's answer.
type Snapshot struct {
	Time time.Time `json:"time"`
	Held []Entry   `json:"held"`
}

// Collect reads every source now.
func Collect(sources ...Source) Snapshot {
	now := time.Now()
	s := Snapshot{Time: now, Held: []Entry{}}
	for _, src := range sources {
		for _, h := range src() {
			s.Held = append(s.Held, entry(h, now))
		}
	}
	return s
}

func entry(h Hold, now time.Time) Entry {
	e := Entry{
		Key:         h.Key(),
		Token:       h.Token(),
		Lease:       strconv.FormatInt(int64(h.Lease()), 16),
		TTLSeconds:  h.TTL().Seconds(),
		HeldSeconds: now.Sub(h.Acquired()).Seconds(),
		Acquired:    h.Acquired(),
		Deadline:    h.Deadline(),
		Valid:       h.Context().Err() == nil,
	}
	if left := h.Deadline().Sub(now); left > 0 {
		e.TTLLeftSeconds = left.Seconds()
	}
	if !e.Valid {
		e.Ended = context.Cause(h.Context()).Error()
	}
	if v, ok := h.(valuer); ok {
		e.Value = v.Value()
	}
	// The key is /<namespace>/v1/<kind>/<escaped name>/<lease>.
	if ns, _, ok := strings.Cut(strings.TrimPrefix(e.Key, "/"), "/"); ok {
		if p, err := keys.Parse(ns, e.Key); err == nil {
			e.Kind, e.Namespace, e.Name = string(p.Kind), ns, p.Name
		}
	}
	return e
}

// Handler serves Collect(sources...) as indented JSON to GET and HEAD
// requests, and 405 to others.
func Handler(sources ...Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := json.MarshalIndent(Collect(sources...), "", "  ")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(append(body, '\n'))
		}
	})
}
