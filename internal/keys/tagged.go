package keys

import (
	"fmt"
	"strconv"
	"strings"
)

// Tags of the per-acquisition keys of semaphores and read/write locks.
const (
	TagPermit = "p"
	TagRead   = "r"
	TagWrite  = "w"
	// TagSet marks the keys of a mutex set: one per name, all put in one
	// transaction, so they share one CreateRevision.
	TagSet = "s"
)

// TaggedKey is the key of one acquisition on a lease that may hold several
// under one prefix: the lease key, '.', the tag and a number unique in the
// process, as in "/baton/v1/semaphore/jobs/694d81a5c0f4e305.p12".
func TaggedKey(leaseKey, tag string, n uint64) string {
	return leaseKey + "." + tag + strconv.FormatUint(n, 10)
}

// TagOf returns the tag of a tagged key's last segment ("" when it has
// none), so a read/write lock tells readers from writers.
func TagOf(key string) string {
	seg := key[strings.LastIndexByte(key, '/')+1:]
	i := strings.IndexByte(seg, '.')
	if i < 0 || i+1 >= len(seg) {
		return ""
	}
	return seg[i+1 : i+2]
}

// LimitKey is where a semaphore's limit is stored: the contenders' prefix
// without its trailing slash, so no read of the contenders sees it.
func LimitKey(ns, name string) string {
	p := Prefix(ns, Semaphore, name)
	return p[:len(p)-1]
}

// ParseTagged takes apart a contender key of namespace ns whose last
// segment may carry a tag (TaggedKey); tag is "" for a plain lease key.
func ParseTagged(ns, key string) (p Parsed, tag string, err error) {
	i := strings.LastIndexByte(key, '/')
	seg := key[i+1:]
	base, rest, tagged := strings.Cut(seg, ".")
	if !tagged {
		p, err = Parse(ns, key)
		return p, "", err
	}
	if len(rest) < 2 {
		return Parsed{}, "", fmt.Errorf("%w: key %q has an empty tag", ErrInvalid, key)
	}
	tag = rest[:1]
	if n, err := strconv.ParseUint(rest[1:], 10, 64); err != nil || strconv.FormatUint(n, 10) != rest[1:] {
		return Parsed{}, "", fmt.Errorf("%w: key %q does not end in a tag and a number", ErrInvalid, key)
	}
	p, err = Parse(ns, key[:i+1]+base)
	return p, tag, err
}
