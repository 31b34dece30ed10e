package shard

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// The keys of a group, under its prefix /<ns>/v1/shard/<escaped group>/:
// m/<escaped member> (the member, on its lease, valued memberValue) and
// s/<id, 5 digits>/<lease id hex> (one per shard and contender, as a
// mutex's, valued the member's name).
const (
	memberSeg = "m/"
	shardSeg  = "s/"
)

// GroupPrefix is the etcd prefix of every key of group in namespace ns.
func GroupPrefix(ns, group string) string { return keys.Prefix(ns, keys.Shard, group) }

func memberKey(prefix, member string) string { return prefix + memberSeg + keys.Escape(member) }

func shardPrefix(prefix string, id int) string { return fmt.Sprintf("%s%s%05d/", prefix, shardSeg, id) }

// memberValue is what a member's key carries.
type memberValue struct {
	Count    int    `json:"count"`
	Identity string `json:"identity,omitempty"`
	// Stuck are the shards whose fn outlived its drain on this member and
	// still runs: the member cannot take them, and the assignment gives
	// them to others.
	Stuck []int `json:"stuck,omitempty"`
}

// parsed is one key of a group taken apart; kind 0 is a key this package
// does not know (ignored).
type parsed struct {
	kind   byte // 'm' or 's'
	member string
	shard  int
}

func parseKey(prefix, key string) parsed {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return parsed{}
	}
	if name, ok := strings.CutPrefix(rest, memberSeg); ok {
		m, err := keys.Unescape(name)
		if err != nil || m == "" {
			return parsed{}
		}
		return parsed{kind: 'm', member: m}
	}
	if rest, ok := strings.CutPrefix(rest, shardSeg); ok {
		id, _, ok := strings.Cut(rest, "/")
		n, err := strconv.Atoi(id)
		if !ok || err != nil || n < 0 || len(id) != 5 {
			return parsed{}
		}
		return parsed{kind: 's', shard: n}
	}
	return parsed{}
}

// member is a live member as the group's keys show it.
type member struct {
	name  string
	lease clientv3.LeaseID
	rev   int64 // its key's CreateRevision: the join order
	value memberValue
}

func newMember(name string, kv *mvccpb.KeyValue) member {
	var mv memberValue
	_ = json.Unmarshal(kv.Value, &mv) // a bad value counts as count 0: a mismatch
	return member{name: name, lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision, value: mv}
}

// parseMember is kv as a member, if it is a member key under prefix.
func parseMember(prefix string, kv *mvccpb.KeyValue) (member, bool) {
	p := parseKey(prefix, string(kv.Key))
	if p.kind != 'm' {
		return member{}, false
	}
	return newMember(p.member, kv), true
}

// contender is one key of a shard's queue.
type contender struct {
	key    string
	member string
	lease  clientv3.LeaseID
	rev    int64
}
