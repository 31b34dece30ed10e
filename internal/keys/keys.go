// Package keys validates lock and election names and namespaces, and builds
// the etcd keys baton uses:
//
//	/<namespace>/v1/lock/<escaped name>/<lease id hex>
//	/<namespace>/v1/election/<escaped name>/<lease id hex>
//	/<namespace>/v1/released   (the releases' marks, toggled by each:
//	/<namespace>/v1/released-b  ReleasedKey, ReleasedAltKey)
//	/<namespace>/audit/v1/...   (the audit trail, outside the namespace:
//	                             AuditPrefix, RequestAuditPrefix)
//
// Escaping makes the name's path segment free of '/', so that no name's
// prefix is a prefix of another name's ("jobs" and "jobs/x" never see each
// other's keys), and injective, so that "a/" and "a%2F" stay distinct.
package keys

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes is the longest name accepted, in bytes of UTF-8.
const MaxNameBytes = 256

// MaxNamespaceBytes is the longest namespace accepted.
const MaxNamespaceBytes = 64

// DefaultNamespace is used when no namespace is given.
const DefaultNamespace = "baton"

// Kind is the kind of coordination object a key belongs to.
type Kind string

// The kinds of key under a namespace.
const (
	Lock     Kind = "lock"
	Election Kind = "election"
	Fence    Kind = "fence"
	// Semaphore keys are tagged (TaggedKey); the limit lives at LimitKey.
	Semaphore Kind = "semaphore"
	// RWLock keys are tagged TagRead or TagWrite.
	RWLock Kind = "rwlock"
	Audit  Kind = "audit"
	// Delay keys hold the lock-delay state of one lock, semaphore, read/write
	// lock or election: /<ns>/v1/delay/<kind>/<escaped name>/...
	Delay Kind = "delay"
	// Shard keys are a shard group's members and per-shard queues:
	// /<ns>/v1/shard/<escaped group>/m/<escaped member> and
	// /<ns>/v1/shard/<escaped group>/s/<id>/<lease id hex>.
	Shard Kind = "shard"
	// Candidate keys are an election's records of its candidates, their
	// requests to end a term and the marks of keys a hand-over moved:
	// /<ns>/v1/candidate/<escaped name>/...
	Candidate Kind = "candidate"
)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid")

// ValidateName reports whether name can name a lock or election: non-empty,
// at most MaxNameBytes bytes of valid UTF-8, no control characters.
func ValidateName(field, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s must not be empty", ErrInvalid, field)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: %s is %d bytes, at most %d allowed", ErrInvalid, field, len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalid, field, name)
	}
	for i, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q has control character %U at byte %d", ErrInvalid, field, name, r, i)
		}
	}
	return nil
}

// ValidateNamespace reports whether ns can be a namespace: 1 to
// MaxNamespaceBytes bytes of ASCII letters, digits, '.', '_' and '-'. The
// namespace is the first segment of every key, and the unit of RBAC grants.
func ValidateNamespace(ns string) error {
	if ns == "" {
		return fmt.Errorf("%w: namespace must not be empty", ErrInvalid)
	}
	if len(ns) > MaxNamespaceBytes {
		return fmt.Errorf("%w: namespace is %d bytes, at most %d allowed", ErrInvalid, len(ns), MaxNamespaceBytes)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: namespace %q may hold only letters, digits, '.', '_' and '-' (byte %d is %q)", ErrInvalid, ns, i, c)
		}
	}
	if ns == "." || ns == ".." {
		return fmt.Errorf("%w: namespace %q is reserved", ErrInvalid, ns)
	}
	return nil
}

// Escape encodes a name as one key segment: '%' becomes "%25" and '/'
// becomes "%2F"; every other byte stays as it is, so keys stay readable in
// etcdctl.
func Escape(name string) string {
	if !strings.ContainsAny(name, "%/") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Unescape reverses Escape. It rejects any segment Escape cannot produce.
func Unescape(seg string) (string, error) {
	if strings.Contains(seg, "/") {
		return "", fmt.Errorf("%w: escaped name %q contains '/'", ErrInvalid, seg)
	}
	if !strings.Contains(seg, "%") {
		return seg, nil
	}
	var b strings.Builder
	b.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		if seg[i] != '%' {
			b.WriteByte(seg[i])
			continue
		}
		switch {
		case strings.HasPrefix(seg[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(seg[i:], "%2F"):
			b.WriteByte('/')
		default:
			return "", fmt.Errorf("%w: escaped name %q has a bad escape at byte %d", ErrInvalid, seg, i)
		}
		i += 2
	}
	return b.String(), nil
}

// NamespacePrefix is the prefix of every key of namespace ns, with a
// trailing slash: the one prefix an RBAC role needs.
func NamespacePrefix(ns string) string { return "/" + ns + "/v1/" }

// KindPrefix is the prefix of every key of one kind in namespace ns.
func KindPrefix(ns string, kind Kind) string { return NamespacePrefix(ns) + string(kind) + "/" }

// Prefix is the prefix under which every contender of one lock or election
// has its key, with a trailing slash.
func Prefix(ns string, kind Kind, name string) string {
	return KindPrefix(ns, kind) + Escape(name) + "/"
}

// LeaseKey is a contender's key: the prefix and its lease ID in hex, as
// etcd's concurrency package names it, so the two interoperate.
func LeaseKey(prefix string, lease int64) string {
	return prefix + strconv.FormatInt(lease, 16)
}

// ReleasedKey and ReleasedAltKey are the namespace's two release marks
// (of key, a prefix or key under it): /<namespace>/v1/released and
// /<namespace>/v1/released-b, no lease. A release's transaction deletes
// whichever exists and puts the other, so that the deletion of a mark in
// the revision of a key's deletion tells a watch of deletions alone that
// it was a holder's own release, which its holder knew of first.
func ReleasedKey(key string) string { return NamespaceOf(key) + "released" }

// ReleasedAltKey is the namespace's other release mark (ReleasedKey).
func ReleasedAltKey(key string) string { return NamespaceOf(key) + "released-b" }

// IsReleased says whether key is one of its namespace's release marks.
func IsReleased(key string) bool {
	ns := NamespaceOf(key)
	if len(ns) >= len(key) || !strings.HasPrefix(key, ns) {
		return false
	}
	rest := key[len(ns):]
	return rest == "released" || rest == "released-b"
}

// Parsed is a contender key taken apart.
type Parsed struct {
	Kind  Kind
	Name  string
	Lease int64
}

// Parse takes apart a contender key of namespace ns. It fails for keys that
// are not of the form LeaseKey(Prefix(ns, kind, name), lease), or for a
// lock, a mutex set's TaggedKey of one (tag TagSet).
func Parse(ns, key string) (Parsed, error) {
	rest, ok := strings.CutPrefix(key, NamespacePrefix(ns))
	if !ok {
		return Parsed{}, fmt.Errorf("%w: key %q is outside namespace %q", ErrInvalid, key, ns)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return Parsed{}, fmt.Errorf("%w: key %q is not <kind>/<name>/<lease>", ErrInvalid, key)
	}
	name, err := Unescape(parts[1])
	if err != nil {
		return Parsed{}, err
	}
	if err := ValidateName("name", name); err != nil {
		return Parsed{}, err
	}
	seg := parts[2]
	if base, n, ok := strings.Cut(seg, "."+TagSet); ok && Kind(parts[0]) == Lock {
		// A mutex set's key: TaggedKey(lease key, TagSet, n).
		if v, err := strconv.ParseUint(n, 10, 64); err == nil && strconv.FormatUint(v, 10) == n {
			seg = base
		}
	}
	lease, err := strconv.ParseInt(seg, 16, 64)
	if err != nil || lease <= 0 || strconv.FormatInt(lease, 16) != seg {
		return Parsed{}, fmt.Errorf("%w: key %q does not end in a lease ID", ErrInvalid, key)
	}
	return Parsed{Kind: Kind(parts[0]), Name: name, Lease: lease}, nil
}

// NamespaceOf is "/<ns>/v1/" for a key "/<ns>/v1/...", or key itself when
// it has no such form.
func NamespaceOf(key string) string {
	if strings.HasPrefix(key, "/") {
		// A slice of key up to its third slash: no allocation on the lock path.
		slashes := 0
		for i := 1; i < len(key); i++ {
			if key[i] == '/' {
				if slashes++; slashes == 2 {
					return key[:i+1]
				}
			}
		}
		return key
	}
	parts := strings.SplitN(key, "/", 4)
	if len(parts) < 4 {
		return key
	}
	return "/" + parts[1] + "/" + parts[2] + "/"
}
