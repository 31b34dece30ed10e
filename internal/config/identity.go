package config

import (
	"os"
	"strconv"
	"sync"

	"github.com/batonhq/baton/internal/keys"
)

// MaxIdentityBytes bounds WithIdentity.
const MaxIdentityBytes = keys.MaxNameBytes

// DefaultIdentity is "host:pid" of this process.
func DefaultIdentity() string { return defaultIdentity() }

// defaultIdentity is made once: every primitive's keys carry it.
var defaultIdentity = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
})

// HolderIdentity is the value written to the keys: WithIdentity's, checked
// like a name (non-empty, at most MaxIdentityBytes of UTF-8, no control
// characters), or DefaultIdentity.
func (c Config) HolderIdentity() (string, error) {
	if !c.IdentitySet {
		return DefaultIdentity(), nil
	}
	if err := keys.ValidateName("WithIdentity", c.Identity); err != nil {
		return "", err
	}
	return c.Identity, nil
}
