package keyspace

import (
	"strings"

	"github.com/batonhq/baton/internal/keys"
)

// lockStateKinds are the kinds `baton locks` lists, by key kind.
var lockStateKinds = map[keys.Kind]string{keys.Lock: kindMutex, keys.Semaphore: KindSemaphore, keys.RWLock: "rwlock"}

// Kinds of hold as `baton lock` and `baton locks` name them.
const (
	kindMutex     = "mutex"
	KindSemaphore = "semaphore"
	KindRead      = "rwlock read"
	kindWrite     = "rwlock write"
)

// RowKind is a row's kind; rows of mutexes leave it empty.
func RowKind(r LockRow) string {
	if r.Kind == "" {
		return kindMutex
	}
	return r.Kind
}

// KindNameAfter parses "<kind>/<escaped name>/<rest>" of a key under
// prefix; ok is false when key is not under it or not of that shape.
func KindNameAfter(prefix, key string) (kind keys.Kind, name, rest string, ok bool) {
	tail, found := strings.CutPrefix(key, prefix)
	if !found {
		return "", "", "", false
	}
	parts := strings.SplitN(tail, "/", 3)
	if len(parts) != 3 {
		return "", "", "", false
	}
	name, err := keys.Unescape(parts[1])
	if err != nil || name == "" {
		return "", "", "", false
	}
	return keys.Kind(parts[0]), name, parts[2], true
}
