package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
	"github.com/batonhq/baton/mutex"
)

// lockRow is one line of `baton locks`: one holder of a lock.
type lockRow struct {
	Name    string
	Kind    string // kindMutex ("" too), kindSemaphore, kindRead or kindWrite
	Holder  mutex.Contender
	Since   time.Time // zero when unknown
	Waiters int
	Holders int // how many hold the same lock (0: one)
	Limit   int // a semaphore's stored limit (0: none or unknown)
	// Set names every lock its holder took with it in one transaction
	// (baton lock A B --, mutex.NewSet), this one included; nil otherwise.
	Set []string
	// Release is the release request pending to the holder, if any.
	Release *request.Request
}

type locksView struct {
	Namespace string
	Prefix    string
	Locks     []lockRow
	Delays    []delayRow // running lock-delays
	Now       time.Time
}

type lockJSON struct {
	Name      string     `json:"name"`
	Kind      string     `json:"kind,omitempty"`
	Holders   int        `json:"holders,omitempty"`
	Limit     int        `json:"limit,omitempty"`
	Holder    string     `json:"holder"`
	Key       string     `json:"key"`
	Token     int64      `json:"token"`
	Lease     string     `json:"lease"`
	TTLLeft   int64      `json:"ttl_left_seconds"`
	HeldSince *time.Time `json:"held_since"`
	HeldFor   *float64   `json:"held_for_seconds"`
	Waiters   int        `json:"waiters"`
	Set       []string   `json:"set,omitempty"`
	// Release is the release request pending to this holder.
	Release *releaseJSON `json:"release_request,omitempty"`
}

func writeLocks(w io.Writer, asJSON bool, v locksView) error {
	if asJSON {
		out := struct {
			Namespace string      `json:"namespace"`
			Count     int         `json:"count"`
			Locks     []lockJSON  `json:"locks"`
			Delays    []delayJSON `json:"lock_delays"`
		}{Namespace: v.Namespace, Count: len(v.Locks), Locks: []lockJSON{}, Delays: delaysJSON(v.Delays)}
		for _, l := range v.Locks {
			out.Locks = append(out.Locks, lockJSONOf(l, v.Now))
		}
		return writeJSON(w, out)
	}
	if len(v.Locks) == 0 {
		what := "no locks are held in namespace " + safeQ(v.Namespace)
		if v.Prefix != "" {
			what += " under " + safeQ(v.Prefix)
		}
		if _, err := fmt.Fprintln(w, what); err != nil {
			return err
		}
		return writeLockState(w, nil, v.Delays)
	}
	t := newTable(w, "NAME", "KIND", "HOLDERS", "HOLDER", "TOKEN", "TTL LEFT", "HELD FOR", "WAITERS", "KEY")
	objects := make(map[[2]string]bool)
	for _, l := range v.Locks {
		objects[[2]string{l.Name, string(heldKindOf(l))}] = true
		t.row(safe(l.Name), rowKind(l), holdersCell(l), safe(dash(l.Holder.Identity)), l.Holder.Token.String(), ttlText(l.Holder.TTL),
			ageText(v.Now, l.Since), strconv.Itoa(l.Waiters), safe(l.Holder.Key))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if err := writeSets(w, v.Locks); err != nil {
		return err
	}
	if err := writeLockState(w, v.Locks, v.Delays); err != nil {
		return err
	}
	if len(objects) == len(v.Locks) {
		_, err := fmt.Fprintf(w, "%d lock(s)\n", len(v.Locks))
		return err
	}
	_, err := fmt.Fprintf(w, "%d lock(s), %d holder(s)\n", len(objects), len(v.Locks))
	return err
}

func newLocksCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "locks [PREFIX]",
		Short: "List the locks of the namespace: name, kind, holders, token, TTL left, held for, waiters",
		Long: `List every held lock of the namespace whose name starts with PREFIX, and
how many. etcd filters by PREFIX; the holders' lease TTLs are asked in
parallel.

KIND is mutex (baton lock, package mutex), semaphore (baton lock --limit,
package semaphore) or rwlock read / rwlock write (baton lock --shared,
package rwmutex). A semaphore or a read lock has a line per holder;
HOLDERS says how many hold it (of the limit, for a semaphore). The same
name under two kinds names two objects that never wait for each other.

"held for" is known only for holders that recorded when they acquired
(baton lock does); for others it shows "unknown": etcd itself keeps no
acquisition time.

Below the table: each lock-delay running (after a holder was lost without
releasing, the time left on etcd's clock before anyone with a lock-delay
acquires) and each release request pending to a holder (who asked, when,
and why, as they wrote it).`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			prefix := ""
			if len(a) == 1 {
				prefix = a[0]
			}
			if g.fanOut(cmd) {
				return g.locksAcross(cmd, prefix)
			}
			ctx := cmd.Context()
			cli, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			octx, cancel := g.opContext(ctx)
			defer cancel()
			v, what, err := readLocks(octx, cli, g.namespace, prefix)
			if err != nil {
				return g.failed(what, err)
			}
			v.Now = g.io.Now()
			return writeLocks(cmd.OutOrStdout(), g.json(), v)
		},
	}
}

// readLocks reads what baton locks shows of namespace ns (without Now);
// on error, what names the read that failed.
func readLocks(ctx context.Context, cli *clientv3.Client, ns, prefix string) (v locksView, what string, err error) {
	v = locksView{Namespace: ns, Prefix: prefix}
	if v.Locks, err = listLocks(ctx, cli, ns, prefix); err != nil {
		return v, "list locks", err
	}
	held := make(map[keys.Kind]map[string]time.Time)
	for _, k := range []keys.Kind{keys.Lock, keys.Semaphore, keys.RWLock} {
		if held[k], err = readHeld(ctx, cli, ns, k, ""); err != nil {
			return v, "read acquisition records", err
		}
	}
	for i := range v.Locks {
		v.Locks[i].Since = heldLookup(held[heldKindOf(v.Locks[i])], v.Locks[i].Name, v.Locks[i].Holder.Lease)
	}
	if err := fillReleases(ctx, cli, ns, v.Locks); err != nil {
		return v, "read release requests", err
	}
	if v.Delays, err = listDelays(ctx, cli, ns, prefix); err != nil {
		return v, "read lock-delays", err
	}
	return v, "", nil
}

// lockJSONOf is one row of baton locks -o json.
func lockJSONOf(l lockRow, now time.Time) lockJSON {
	return lockJSON{Name: l.Name, Kind: rowKind(l), Holders: max(l.Holders, 1), Limit: l.Limit,
		Holder: l.Holder.Identity, Key: l.Holder.Key,
		Token: int64(l.Holder.Token), Lease: leaseHex(int64(l.Holder.Lease)), TTLLeft: ttlSeconds(l.Holder.TTL),
		HeldSince: since(l.Since), HeldFor: sinceSeconds(now, l.Since), Waiters: l.Waiters, Set: l.Set, Release: releaseOf(l.Release)}
}

// ttlWorkers bounds the TimeToLive requests in flight.
const ttlWorkers = 32

// listLocks reads the locks (mutexes, semaphores, read/write locks) of
// namespace ns whose name starts with prefix, sorted by name: each range is filtered by etcd (escaping keeps name
// prefixes as key prefixes, and an escaped prefix never reaches past the
// name's segment), and the holders' TTLs are asked in parallel.
func listLocks(ctx context.Context, cli *clientv3.Client, ns, prefix string) ([]lockRow, error) {
	resp, err := cli.Get(ctx, keys.KindPrefix(ns, keys.Lock)+keys.Escape(prefix), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	byName := make(map[string]int)
	var rows []lockRow
	for _, kv := range resp.Kvs {
		p, err := keys.Parse(ns, string(kv.Key))
		if err != nil || p.Kind != keys.Lock || !strings.HasPrefix(p.Name, prefix) {
			continue // not a key baton wrote
		}
		if i, ok := byName[p.Name]; ok {
			rows[i].Waiters++
			continue
		}
		byName[p.Name] = len(rows)
		rows = append(rows, lockRow{Name: p.Name, Holder: mutex.Contender{Key: string(kv.Key), Token: fencing.Token(kv.CreateRevision),
			Lease: clientv3.LeaseID(kv.Lease), Identity: string(kv.Value)}})
	}
	for _, kind := range []keys.Kind{keys.Semaphore, keys.RWLock} {
		more, err := listTagged(ctx, cli, ns, kind, prefix)
		if err != nil {
			return nil, err
		}
		rows = append(rows, more...)
	}
	if err := fillTTLs(ctx, cli, rows); err != nil {
		return nil, err
	}
	setMembers(rows)
	// By name, then kind; a lock's holders stay in token order.
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Name != rows[j].Name {
			return rows[i].Name < rows[j].Name
		}
		return rowKind(rows[i]) < rowKind(rows[j])
	})
	return rows, nil
}

// fillTTLs asks each distinct holder lease's TTL, at most ttlWorkers at a
// time; the first error ends the others.
func fillTTLs(ctx context.Context, cli *clientv3.Client, rows []lockRow) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	leases := make(chan clientv3.LeaseID)
	var mu sync.Mutex
	ttls := make(map[clientv3.LeaseID]time.Duration, len(rows))
	var wg sync.WaitGroup
	for range min(ttlWorkers, len(rows)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range leases {
				ttl, err := leaseTTL(ctx, cli, id)
				if err != nil {
					cancel(err)
					continue
				}
				mu.Lock()
				ttls[id] = ttl
				mu.Unlock()
			}
		}()
	}
	seen := make(map[clientv3.LeaseID]bool, len(rows))
feed:
	for _, r := range rows {
		if seen[r.Holder.Lease] {
			continue
		}
		seen[r.Holder.Lease] = true
		select {
		case leases <- r.Holder.Lease:
		case <-ctx.Done():
			break feed
		}
	}
	close(leases)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	for i := range rows {
		rows[i].Holder.TTL = ttls[rows[i].Holder.Lease]
	}
	return nil
}

// leaseTTL is a lease's time left; -1 once it is gone.
func leaseTTL(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) (time.Duration, error) {
	if id == clientv3.NoLease {
		return -1, nil
	}
	resp, err := cli.TimeToLive(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return -1, nil
	case err != nil:
		return 0, err
	case resp.TTL < 0:
		return -1, nil
	}
	return time.Duration(resp.TTL) * time.Second, nil
}
