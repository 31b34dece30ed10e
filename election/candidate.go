package election

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/inspect"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
)

// Candidate is one candidate of the election: under Oldest an entry of the
// queue, under Preferred a live candidate record (and any key in the
// election's prefix without one, such as an etcd concurrency.Election
// campaigning there).
type Candidate struct {
	// Key is the candidate's key in the election's prefix: the one it
	// holds (under Oldest, or as the Preferred leader) or will hold when it
	// leads (a waiting Preferred candidate). Transfer takes it.
	Key   string
	Value string
	// Token is the key's CreateRevision: the fencing token it holds or,
	// under Oldest, will hold when it leads. Zero for a waiting Preferred
	// candidate, which gets a fresh token when it leads.
	Token   fencing.Token
	LeaseID clientv3.LeaseID
	// TTL is the lease's time left when read; -1 if the lease is gone.
	TTL time.Duration
	// Leader says the candidate leads.
	Leader bool
	// Priority and Version are what the candidate said with WithPriority
	// and WithVersion; zero and "" without them.
	Priority int
	Version  string
	// Strategy is the one the candidate campaigns with; Oldest for a
	// candidate without a record (no attributes, or not baton's).
	Strategy Strategy
	// Record is the key of the candidate's record of attributes, outside
	// the election's prefix; "" when it has none.
	Record string
}

// record is a candidate's attributes, stored at its record key.
type record struct {
	Value    string `json:"value"`
	Priority int    `json:"priority"`
	Version  string `json:"version,omitempty"`
	Strategy string `json:"strategy"`
	// Moves: the candidate puts its key again when a hand-over skips it
	// (Transfer under Oldest); a record without it is an older release's,
	// whose candidate would take the skip for a loss.
	Moves bool `json:"moves,omitempty"`
}

// entry is a record as read.
type entry struct {
	record
	key   string
	rev   int64
	lease clientv3.LeaseID
}

func (en *entry) rank() rank {
	return rank{priority: en.Priority, version: en.Version, age: en.rev}
}

// The keys of coordination, under /<ns>/v1/candidate/<escaped name>/:
// "<strategy>/<lease hex>" records, "end/<leader lease hex>" requests
// to end a term and "moved/<lease hex>" marks of skipped keys (movedKey).
const candidateKind = keys.Candidate

// keyOf is the key en holds when it leads.
func (e *Election) keyOf(en *entry) string { return keys.LeaseKey(e.Prefix(), int64(en.lease)) }

func (e *Election) recordPrefix(s Strategy) string { return e.coord + s.String() + "/" }
func (e *Election) endKey(lease clientv3.LeaseID) string {
	return keys.LeaseKey(e.coord+"end/", int64(lease))
}

// leaseOf reads the lease hex at the end of key; 0 when there is none.
func leaseOf(key string) clientv3.LeaseID {
	i := strings.LastIndexByte(key, '/')
	id, err := strconv.ParseInt(key[i+1:], 16, 64)
	if err != nil {
		return 0
	}
	return clientv3.LeaseID(id)
}

// state is the election and its records at one revision.
type state struct {
	rev     int64
	keys    []*mvccpb.KeyValue // the election's prefix, oldest first
	recs    map[Strategy]map[clientv3.LeaseID]*entry
	endReqs map[clientv3.LeaseID]*mvccpb.KeyValue
	moved   map[clientv3.LeaseID]*mvccpb.KeyValue // marks of keys a hand-over moved (movedKey)
}

func (st *state) leader() *mvccpb.KeyValue {
	if len(st.keys) == 0 {
		return nil
	}
	return st.keys[0]
}

// leaderCandidate is the leader as a Candidate, its strategy that of its
// record (Oldest without a Preferred one); false when nobody leads.
func (st *state) leaderCandidate() (Candidate, bool) {
	l := st.leader()
	if l == nil {
		return Candidate{}, false
	}
	c := Candidate{Key: string(l.Key), Value: string(l.Value), Token: fencing.Token(l.CreateRevision), LeaseID: clientv3.LeaseID(l.Lease), Leader: true, Strategy: Oldest}
	if rec := st.recs[Preferred][c.LeaseID]; rec != nil {
		c.Strategy, c.Priority, c.Version, c.Record = Preferred, rec.Priority, rec.Version, rec.key
	} else if rec := st.recs[Oldest][c.LeaseID]; rec != nil {
		c.Record = rec.key
	}
	return c, true
}

// ranked returns the Preferred records, best first.
func (st *state) ranked() []*entry {
	out := make([]*entry, 0, len(st.recs[Preferred]))
	for _, en := range st.recs[Preferred] {
		out = append(out, en)
	}
	slices.SortFunc(out, func(a, b *entry) int { return compareRanks(a.rank(), b.rank()) })
	return out
}

// readState reads the election's keys and records at one revision.
func (e *Election) readState(ctx context.Context) (*state, error) {
	var resp *clientv3.TxnResponse
	err := retry.Reads(ctx, func(actx context.Context) (err error) {
		resp, err = e.o.Client().Txn(clientv3.WithRequireLeader(actx)).Then(
			clientv3.OpGet(e.Prefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
			clientv3.OpGet(e.coord, clientv3.WithPrefix()),
		).Commit()
		return err
	})
	if err != nil {
		return nil, failure(ctx, err)
	}
	st := &state{rev: resp.Header.Revision, keys: resp.Responses[0].GetResponseRange().Kvs,
		recs: map[Strategy]map[clientv3.LeaseID]*entry{}, endReqs: map[clientv3.LeaseID]*mvccpb.KeyValue{}, moved: map[clientv3.LeaseID]*mvccpb.KeyValue{}}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		rest := strings.TrimPrefix(string(kv.Key), e.coord)
		kind, _, _ := strings.Cut(rest, "/")
		switch kind {
		case "end":
			st.endReqs[leaseOf(rest)] = kv
			continue
		case "moved":
			st.moved[leaseOf(rest)] = kv
			continue
		}
		s, ok := parseStrategy(kind)
		if !ok {
			continue
		}
		var r record
		if json.Unmarshal(kv.Value, &r) != nil {
			continue // not a record baton wrote
		}
		if st.recs[s] == nil {
			st.recs[s] = map[clientv3.LeaseID]*entry{}
		}
		st.recs[s][clientv3.LeaseID(kv.Lease)] = &entry{record: r, key: string(kv.Key), rev: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)}
	}
	return st, nil
}

func failure(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// Candidates returns the candidates, the leader first: under Oldest the
// queue in order, under Preferred the leader, then the live candidates
// best first (with any key in the election's prefix that has no record
// after the leader), each with its attributes and its lease's time left.
func (e *Election) Candidates(ctx context.Context) ([]Candidate, error) {
	st, err := e.readState(ctx)
	if err != nil {
		return nil, err
	}
	var out []Candidate
	add := func(kv *mvccpb.KeyValue, en *entry, s Strategy) {
		c := Candidate{Strategy: s}
		if kv != nil {
			c.Key, c.Value, c.Token, c.LeaseID = string(kv.Key), string(kv.Value), fencing.Token(kv.CreateRevision), clientv3.LeaseID(kv.Lease)
		}
		if en != nil {
			if kv == nil {
				c.Key, c.Value, c.LeaseID = keys.LeaseKey(e.Prefix(), int64(en.lease)), en.Value, en.lease
			}
			c.Priority, c.Version, c.Record = en.Priority, en.Version, en.key
		}
		out = append(out, c)
	}
	if len(st.recs[Preferred]) == 0 {
		for _, kv := range st.keys {
			en := st.recs[Oldest][clientv3.LeaseID(kv.Lease)]
			add(kv, en, Oldest)
		}
	} else {
		seen := map[clientv3.LeaseID]bool{}
		for _, kv := range st.keys {
			en := st.recs[Preferred][clientv3.LeaseID(kv.Lease)]
			if en == nil {
				add(kv, nil, Oldest)
				continue
			}
			seen[en.lease] = true
			add(kv, en, Preferred)
		}
		for _, en := range st.ranked() {
			if !seen[en.lease] {
				add(nil, en, Preferred)
			}
		}
	}
	if len(out) > 0 {
		out[0].Leader = out[0].Token > 0
	}
	entries := make([]inspect.Entry, len(out))
	for i, c := range out {
		entries[i] = inspect.Entry{Lease: c.LeaseID}
	}
	if err := inspect.FillTTLs(ctx, e.o.Client(), entries); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].TTL = entries[i].TTL
	}
	return out, nil
}

// recordOwner keeps the candidate records on the Election's session.
type recordOwner = core.Owner[*core.Hold]

// allowAll lets every record hold at once: records do not queue.
type allowAll struct{}

func (allowAll) Blockers(string, []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int) { return nil, 0 }

// putRecord writes this candidate's record on its lease and returns its
// hold, which ends if the record or the lease is lost.
func (e *Election) putRecord(ctx context.Context, value string) (*core.Hold, error) {
	b, _ := json.Marshal(record{Value: value, Priority: e.cand.Priority, Version: e.cand.Version, Strategy: e.strategy().String(), Moves: true})
	return e.recs.Acquire(ctx, core.Request{Value: string(b), Policy: allowAll{}}, func(h *core.Hold) *core.Hold { return h })
}
