package dev

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/batonhq/baton/fencing"
)

// The demo's protected resource: a ledger of numbered records that admits
// a write only through a fencing guard, as a real store would check a
// token column or header.
const ledgerResource = "ledger"

// ledgerEntry is one write attempt, in the order the ledger saw them.
type ledgerEntry struct {
	At       time.Time
	Worker   string
	Token    int64
	Seq      int
	Accepted bool
	Record   int   // record number, for accepted writes
	Highest  int64 // highest token admitted before this write
}

// ledger serves POST /write?worker=&token=&seq= and reports every attempt.
type ledger struct {
	guard  *fencing.MemoryGuard
	report func(ledgerEntry)

	mu      sync.Mutex
	records int
}

func newLedger(report func(ledgerEntry)) *ledger {
	return &ledger{guard: fencing.NewMemoryGuard(), report: report}
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/write" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	token, err := fencing.ParseToken(q.Get("token"))
	seq, serr := strconv.Atoi(q.Get("seq"))
	if err != nil || serr != nil || q.Get("worker") == "" {
		http.Error(w, "want worker, token and seq", http.StatusBadRequest)
		return
	}
	// Admit and append under one lock: the ledger's order is the order
	// the guard decided in.
	l.mu.Lock()
	defer l.mu.Unlock()
	e := ledgerEntry{At: time.Now(), Worker: q.Get("worker"), Token: int64(token), Seq: seq,
		Highest: int64(l.guard.Highest(ledgerResource))}
	err = l.guard.Admit(context.Background(), ledgerResource, token)
	if err == nil {
		l.records++
		e.Accepted, e.Record = true, l.records
	}
	l.report(e)
	switch {
	case err == nil:
		fmt.Fprintf(w, "accepted record %d\n", e.Record)
	case errors.Is(err, fencing.ErrStale):
		http.Error(w, err.Error(), http.StatusConflict)
	default:
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}
