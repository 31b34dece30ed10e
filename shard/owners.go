package shard

import (
	"cmp"
	"slices"

	"github.com/batonhq/baton/fencing"
)

// Owner is one shard's owner: the member whose key is oldest in the
// shard's queue. An unowned shard has an empty Member.
type Owner struct {
	Shard  int           `json:"shard"`
	Member string        `json:"member,omitempty"`
	Token  fencing.Token `json:"token,omitempty"`
	Key    string        `json:"key,omitempty"`
}

// State is the group at one etcd revision, as Observe sends it.
type State struct {
	Revision int64 `json:"revision"`
	// Members are the live members, sorted by name.
	Members []string `json:"members"`
	// Owners has one entry per shard, index = ID.
	Owners []Owner `json:"owners"`
	// Err is set on the last State sent when etcd refused the read for good.
	Err error `json:"-"`
}

func sortMembers(ms []member) {
	slices.SortFunc(ms, func(a, b member) int { return cmp.Compare(a.rev, b.rev) })
}

func (v *view) owners() []Owner {
	out := make([]Owner, v.count)
	for s := range out {
		out[s].Shard = s
		if h, ok := v.head(s); ok {
			out[s].Member, out[s].Token, out[s].Key = h.member, fencing.Token(h.rev), h.key
		}
	}
	return out
}

func (v *view) memberNames() []string {
	out := make([]string, 0, len(v.members))
	for name := range v.members {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func (v *view) state() State {
	return State{Revision: v.rev, Members: v.memberNames(), Owners: v.owners()}
}
