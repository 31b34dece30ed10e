package keyspace

import (
	"path"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/shard"
)

// ShardsJSON is a shard group summarized, as `baton shards -o json` prints
// it and the page shows it.
type ShardsJSON struct {
	Group    string       `json:"group"`
	Revision int64        `json:"revision"`
	Count    int          `json:"count"`
	Members  []MemberJSON `json:"members"`
	Unowned  int          `json:"unowned"`
	Owners   []OwnerJSON  `json:"owners,omitempty"`
}

// OwnerJSON is one shard's owner, and since when it holds the shard when
// its owner recorded it (baton shard does; see baton locks' "held for").
type OwnerJSON struct {
	shard.Owner
	HeldSince *time.Time `json:"held_since"`
	HeldFor   *float64   `json:"held_for_seconds"`
}

// MemberJSON is one live member and how many shards it owns.
type MemberJSON struct {
	Member string `json:"member"`
	Owns   int    `json:"owns"`
}

// ShardsView summarizes a group's State (shard.Inspect's); held maps the
// group's acquisition records (ReadHeld of keys.Shard) to their times,
// and may be nil.
func ShardsView(group string, st shard.State, held map[string]time.Time, now time.Time) ShardsJSON {
	out := ShardsJSON{Group: group, Revision: st.Revision, Count: len(st.Owners), Members: []MemberJSON{}}
	owns := map[string]int{}
	for _, o := range st.Owners {
		if o.Member == "" {
			out.Unowned++
		}
		owns[o.Member]++
		since := ownerSince(held, group, o)
		out.Owners = append(out.Owners, OwnerJSON{Owner: o, HeldSince: cmdutil.Since(since), HeldFor: cmdutil.SinceSeconds(now, since)})
	}
	for _, m := range st.Members {
		out.Members = append(out.Members, MemberJSON{Member: m, Owns: owns[m]})
	}
	return out
}

// ownerSince is when o's owner recorded that it took the shard; zero when
// unowned or unknown. The owner key ends in its lease, as a lock's does.
func ownerSince(held map[string]time.Time, group string, o shard.Owner) time.Time {
	if o.Member == "" {
		return time.Time{}
	}
	lease, err := strconv.ParseInt(path.Base(o.Key), 16, 64)
	if err != nil {
		return time.Time{}
	}
	return HeldLookup(held, ShardHeldName(group, o.Shard), clientv3.LeaseID(lease))
}

// ShardGroupOf is the shard group a key of namespace ns belongs to
// (/<ns>/v1/shard/<escaped group>/...), for listing a namespace's groups
// from its keys: the shard package keeps no list of them. A segment that
// is no valid group name is no group.
func ShardGroupOf(ns, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, keys.KindPrefix(ns, keys.Shard))
	if !ok {
		return "", false
	}
	seg, _, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	group, err := keys.Unescape(seg)
	if err != nil || keys.ValidateName("shard group name", group) != nil {
		return "", false
	}
	return group, true
}
