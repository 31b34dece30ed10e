package serve

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/semaphore"
	"github.com/batonhq/baton/shard"
)

// Every field of a request is checked here, before anything else is done
// for it, against the library's own bounds: a refusal is INVALID_ARGUMENT
// and its message starts with the field's name as the .proto spells it.

// Bounds of a hold's lock-delay, as mutex.WithLockDelay's.
const (
	minLockDelay = mutex.MinTTL
	maxLockDelay = time.Hour
)

// holdSpec is a checked HoldRequest.
type holdSpec struct {
	namespace   string
	names       []string
	kind        batonv1.LockKind // MUTEX for a mutex or a set
	limit       int              // a semaphore's
	ttl         time.Duration
	identity    string // "" for the caller's default
	try         bool
	waitTimeout time.Duration // 0: as long as the stream is open
	lockDelay   time.Duration
}

// invalid is the error of a refused field.
func invalid(field, format string, a ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
}

// checkHold validates req against the server's settings.
func checkHold(req *batonv1.HoldRequest, defaultNS string, maxTTL time.Duration) (holdSpec, error) {
	sp := holdSpec{namespace: req.GetNamespace(), try: req.GetTry()}
	if err := checkNamespace(&sp.namespace, defaultNS); err != nil {
		return sp, err
	}
	switch sp.kind = req.GetKind(); sp.kind {
	case batonv1.LockKind_LOCK_KIND_UNSPECIFIED:
		sp.kind = batonv1.LockKind_LOCK_KIND_MUTEX
	case batonv1.LockKind_LOCK_KIND_MUTEX, batonv1.LockKind_LOCK_KIND_SEMAPHORE, batonv1.LockKind_LOCK_KIND_READ, batonv1.LockKind_LOCK_KIND_WRITE:
	default:
		return sp, invalid("kind", "unknown kind %d", int32(req.GetKind()))
	}
	switch l := req.GetLimit(); {
	case sp.kind != batonv1.LockKind_LOCK_KIND_SEMAPHORE && l != 0:
		return sp, invalid("limit", "only a semaphore has a limit")
	case sp.kind == batonv1.LockKind_LOCK_KIND_SEMAPHORE && (l < 1 || l > semaphore.MaxLimit):
		return sp, invalid("limit", "%d: a semaphore has 1 to %d permits", l, semaphore.MaxLimit)
	}
	sp.limit = int(req.GetLimit())
	var err error
	if sp.lockDelay, err = duration("lock_delay", req.GetLockDelay()); err != nil {
		return sp, err
	}
	switch d := sp.lockDelay; {
	case d < 0 || d > 0 && d < minLockDelay:
		return sp, invalid("lock_delay", "%v: 0 (none) or at least %v", d, minLockDelay)
	case d > maxLockDelay:
		return sp, invalid("lock_delay", "%v: at most %v", d, maxLockDelay)
	case d%time.Second != 0:
		return sp, invalid("lock_delay", "%v: whole seconds, as etcd leases are", d)
	}
	names := req.GetNames()
	limit := mutex.MaxSetNames
	if sp.lockDelay > 0 {
		limit = mutex.MaxSetNamesWithLockDelay
	}
	switch {
	case len(names) == 0:
		return sp, invalid("names", "at least one name is required")
	case len(names) > 1 && sp.kind != batonv1.LockKind_LOCK_KIND_MUTEX:
		return sp, invalid("names", "%d names: a set is of mutexes; a %s takes one name", len(names), kindName(sp.kind))
	case len(names) > limit:
		return sp, invalid("names", "%d names, at most %d in one set (%d with lock_delay)", len(names), mutex.MaxSetNames, mutex.MaxSetNamesWithLockDelay)
	}
	seen := make(map[string]int, len(names))
	for i, n := range names {
		field := fmt.Sprintf("names[%d]", i)
		if err := keys.ValidateName("name", n); err != nil {
			return sp, invalid(field, "%v", unwrapInvalid(err))
		}
		if j, dup := seen[n]; dup {
			return sp, invalid(field, "the same name as names[%d]", j)
		}
		seen[n] = i
	}
	sp.names = names
	if sp.ttl, err = duration("ttl", req.GetTtl()); err != nil {
		return sp, err
	}
	if err := checkTTL(&sp.ttl, maxTTL); err != nil {
		return sp, err
	}
	if sp.identity = req.GetIdentity(); sp.identity != "" {
		if err := keys.ValidateName("identity", sp.identity); err != nil {
			return sp, invalid("identity", "%v", unwrapInvalid(err))
		}
	}
	if sp.waitTimeout, err = duration("wait_timeout", req.GetWaitTimeout()); err != nil {
		return sp, err
	}
	switch {
	case sp.waitTimeout < 0:
		return sp, invalid("wait_timeout", "%v: must not be negative", sp.waitTimeout)
	case sp.waitTimeout > 0 && sp.try:
		return sp, invalid("wait_timeout", "a try does not wait")
	}
	return sp, nil
}

// leadSpec is a checked LeadRequest.
type leadSpec struct {
	namespace string
	name      string
	value     string // "" for the candidate's identity
	ttl       time.Duration
	strategy  election.Strategy
	priority  int
	version   string // "" for none
	identity  string // "" for the caller's default
}

// checkLead validates req against the server's settings.
func checkLead(req *batonv1.LeadRequest, defaultNS string, maxTTL time.Duration) (leadSpec, error) {
	sp := leadSpec{namespace: req.GetNamespace(), name: req.GetName(), value: req.GetValue(), priority: int(req.GetPriority()), version: req.GetVersion()}
	if err := checkNamespace(&sp.namespace, defaultNS); err != nil {
		return sp, err
	}
	if err := keys.ValidateName("name", sp.name); err != nil {
		return sp, invalid("name", "%v", unwrapInvalid(err))
	}
	if sp.value != "" {
		if err := keys.ValidateName("value", sp.value); err != nil {
			return sp, invalid("value", "%v", unwrapInvalid(err))
		}
	}
	var err error
	if sp.ttl, err = duration("ttl", req.GetTtl()); err != nil {
		return sp, err
	}
	if err := checkTTL(&sp.ttl, maxTTL); err != nil {
		return sp, err
	}
	switch req.GetStrategy() {
	case batonv1.Strategy_STRATEGY_UNSPECIFIED, batonv1.Strategy_STRATEGY_OLDEST:
		sp.strategy = election.Oldest
	case batonv1.Strategy_STRATEGY_PREFERRED:
		sp.strategy = election.Preferred
	default:
		return sp, invalid("strategy", "unknown strategy %d", int32(req.GetStrategy()))
	}
	if sp.version != "" {
		if err := config.ValidateVersion(sp.version); err != nil {
			return sp, invalid("version", "%q: %v", sp.version, err)
		}
	}
	if sp.identity = req.GetIdentity(); sp.identity != "" {
		if err := keys.ValidateName("identity", sp.identity); err != nil {
			return sp, invalid("identity", "%v", unwrapInvalid(err))
		}
	}
	return sp, nil
}

// fenceSpec is a checked FenceRequest: a token to admit, or a write.
type fenceSpec struct {
	namespace string
	resource  string
	token     fencing.Token
	write     *fencedWrite
	identity  string // "" for the caller's default (a write: its hold's)
}

type fencedWrite struct {
	holdID  string
	shard   *uint32 // a membership's shard; nil for a lock's or a term's hold
	puts    []*batonv1.KeyValue
	deletes []string
}

// checkFence validates req; whether the write's keys are the caller's to
// write is Fence's to say (PERMISSION_DENIED).
func checkFence(req *batonv1.FenceRequest, defaultNS string) (fenceSpec, error) {
	sp := fenceSpec{namespace: req.GetNamespace(), resource: req.GetResource()}
	if err := checkNamespace(&sp.namespace, defaultNS); err != nil {
		return sp, err
	}
	if err := keys.ValidateName("resource", sp.resource); err != nil {
		return sp, invalid("resource", "%v", unwrapInvalid(err))
	}
	if err := checkIdentity(&sp.identity, req.GetIdentity()); err != nil {
		return sp, err
	}
	switch op := req.GetOp().(type) {
	case *batonv1.FenceRequest_CheckToken:
		if op.CheckToken <= 0 {
			return sp, invalid("check_token", "%d: a token is a key's CreateRevision, at least 1", op.CheckToken)
		}
		sp.token = fencing.Token(op.CheckToken)
		return sp, nil
	case *batonv1.FenceRequest_Write:
		w := &fencedWrite{holdID: op.Write.GetHoldId(), shard: op.Write.Shard, puts: op.Write.GetPuts(), deletes: op.Write.GetDeletes()}
		if len(w.holdID) != holdIDLen {
			return sp, invalid("write.hold_id", "want the %d characters of a Held's hold_id", holdIDLen)
		}
		switch n := len(w.puts) + len(w.deletes); {
		case n == 0:
			return sp, invalid("write", "no puts and no deletes")
		case n > maxFencedOps:
			return sp, invalid("write", "%d puts and deletes, at most %d in one write", n, maxFencedOps)
		}
		seen := make(map[string]string, len(w.puts)+len(w.deletes))
		check := func(field, key string) error {
			switch {
			case key == "":
				return invalid(field, "a key must not be empty")
			case len(key) > maxKeyBytes:
				return invalid(field, "a key of %d bytes, at most %d", len(key), maxKeyBytes)
			}
			if other, dup := seen[key]; dup {
				return invalid(field, "the same key as %s: etcd writes a key once a transaction", other)
			}
			seen[key] = field
			return nil
		}
		for i, kv := range w.puts {
			if err := check(fmt.Sprintf("write.puts[%d].key", i), kv.GetKey()); err != nil {
				return sp, err
			}
		}
		for i, k := range w.deletes {
			if err := check(fmt.Sprintf("write.deletes[%d]", i), k); err != nil {
				return sp, err
			}
		}
		sp.write = w
		return sp, nil
	}
	return sp, invalid("op", "name one: check_token or write")
}

// shardsSpec is a checked ShardsRequest.
type shardsSpec struct {
	namespace string
	group     string
	count     int
	member    string
	ttl       time.Duration
	drain     time.Duration
	identity  string // "" for the caller's default
}

// checkShards validates req against the server's settings.
func checkShards(req *batonv1.ShardsRequest, defaultNS string, maxTTL time.Duration) (shardsSpec, error) {
	sp := shardsSpec{namespace: req.GetNamespace(), group: req.GetGroup(), member: req.GetMember()}
	if err := checkNamespace(&sp.namespace, defaultNS); err != nil {
		return sp, err
	}
	if err := keys.ValidateName("group", sp.group); err != nil {
		return sp, invalid("group", "%v", unwrapInvalid(err))
	}
	if c := req.GetCount(); c < 1 || c > shard.MaxCount {
		return sp, invalid("count", "%d: a group has 1 to %d shards", c, shard.MaxCount)
	}
	sp.count = int(req.GetCount())
	if err := keys.ValidateName("member", sp.member); err != nil {
		return sp, invalid("member", "%v", unwrapInvalid(err))
	}
	var err error
	if sp.ttl, err = duration("ttl", req.GetTtl()); err != nil {
		return sp, err
	}
	if err := checkTTL(&sp.ttl, maxTTL); err != nil {
		return sp, err
	}
	if sp.drain, err = duration("drain_timeout", req.GetDrainTimeout()); err != nil {
		return sp, err
	}
	switch d := sp.drain; {
	case d == 0:
		sp.drain = shard.DefaultDrainTimeout
	case d < 0:
		return sp, invalid("drain_timeout", "%v: must not be negative", d)
	case d > shard.MaxDrainTimeout:
		return sp, invalid("drain_timeout", "%v: at most %v", d, shard.MaxDrainTimeout)
	}
	return sp, checkIdentity(&sp.identity, req.GetIdentity())
}

// checkIdentity checks an optional identity as a name.
func checkIdentity(dst *string, id string) error {
	if id == "" {
		return nil
	}
	if err := keys.ValidateName("identity", id); err != nil {
		return invalid("identity", "%v", unwrapInvalid(err))
	}
	*dst = id
	return nil
}

// maxKeyBytes bounds a candidate key given as Transfer's to: an
// election's key, its name escaped, is well within it.
const maxKeyBytes = 4096

// checkTo checks a TransferRequest's to: a candidate's key or an identity.
func checkTo(to string) error {
	if to == "" {
		return invalid("to", "name the candidate: its key, or its identity")
	}
	if strings.HasPrefix(to, "/") { // a key: the library finds it live, or not
		if len(to) > maxKeyBytes {
			return invalid("to", "a key of %d bytes, at most %d", len(to), maxKeyBytes)
		}
		return nil
	}
	if err := keys.ValidateName("to", to); err != nil {
		return invalid("to", "%v", unwrapInvalid(err))
	}
	return nil
}

// checkNamespace defaults an empty namespace and checks the rest as the
// library does.
func checkNamespace(ns *string, def string) error {
	if *ns == "" {
		*ns = def
		return nil
	}
	if err := keys.ValidateNamespace(*ns); err != nil {
		return invalid("namespace", "%v", unwrapInvalid(err))
	}
	return nil
}

// checkTTL defaults a zero TTL and applies the library's bounds.
func checkTTL(ttl *time.Duration, maxTTL time.Duration) error {
	d := *ttl
	switch {
	case d == 0:
		*ttl = mutex.DefaultTTL
		if *ttl > maxTTL {
			*ttl = maxTTL
		}
	case d < mutex.MinTTL:
		return invalid("ttl", "%v: at least %v", d, mutex.MinTTL)
	case d > maxTTL:
		return invalid("ttl", "%v: at most %v (the server's --max-ttl)", d, maxTTL)
	case d%time.Second != 0:
		return invalid("ttl", "%v: whole seconds, as etcd leases are", d)
	}
	return nil
}

// duration converts an optional Duration; nil is zero.
func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid(field, "%v", err)
	}
	return d.AsDuration(), nil
}

// checkHoldID checks a hold_id's form; the table says whether it exists.
func checkHoldID(id string) error {
	if len(id) != holdIDLen {
		return invalid("hold_id", "want the %d characters of a Held's hold_id", holdIDLen)
	}
	return nil
}

// unwrapInvalid drops the library's "invalid argument" prefix: the code
// already says it.
func unwrapInvalid(err error) string {
	msg := err.Error()
	if p := mutex.ErrInvalid.Error() + ": "; errors.Is(err, mutex.ErrInvalid) && len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

// kindName is a kind as a message says it: "semaphore".
func kindName(k batonv1.LockKind) string {
	switch k {
	case batonv1.LockKind_LOCK_KIND_SEMAPHORE:
		return "semaphore"
	case batonv1.LockKind_LOCK_KIND_READ:
		return "read lock"
	case batonv1.LockKind_LOCK_KIND_WRITE:
		return "write lock"
	}
	return "mutex"
}
