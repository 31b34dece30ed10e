package config

import (
	"fmt"
	"time"

	"github.com/batonhq/baton/internal/errs"
)

// Candidate is what an election candidate says about itself, and how the
// election picks its leader (package election documents each field).
type Candidate struct {
	Priority int
	Version  string
	Strategy uint8 // 0: oldest, 1: preferred
	Deadline time.Duration
	// Set names the first candidate option given, for the error a
	// primitive other than an election returns.
	Set string
}

// Bounds of the candidate options.
const (
	MaxVersionBytes = 64
	DefaultDeadline = 10 * time.Second
	MinDeadline     = 100 * time.Millisecond
	MaxDeadline     = 5 * time.Minute
)

func candidateOpt(name string, fn func(*Candidate) error) Option {
	return plainOpt(name, func(c *Config) {
		if c.Candidate.Set == "" {
			c.Candidate.Set = name
		}
		if err := fn(&c.Candidate); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: %s", errs.ErrInvalid, err))
		}
	})
}

// Priority sets a candidate's priority.
func Priority(p int) Option {
	return candidateOpt("WithPriority", func(c *Candidate) error { c.Priority = p; return nil })
}

// Version sets a candidate's version: 1 to MaxVersionBytes bytes of ASCII
// letters, digits, '.', '_', '+' and '-'.
func Version(v string) Option {
	return candidateOpt("WithVersion", func(c *Candidate) error {
		if err := ValidateVersion(v); err != nil {
			return fmt.Errorf("WithVersion(%q): %w", v, err)
		}
		c.Version = v
		return nil
	})
}

// ValidateVersion checks a candidate's version as Version does, for a
// caller (the CLI) that checks its input before it has a client.
func ValidateVersion(v string) error {
	if v == "" || len(v) > MaxVersionBytes {
		return fmt.Errorf("must be 1 to %d bytes", MaxVersionBytes)
	}
	for i := 0; i < len(v); i++ {
		ch := v[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '+' || ch == '-') {
			return fmt.Errorf("byte %d is %q; allowed: letters, digits, '.', '_', '+', '-'", i, ch)
		}
	}
	return nil
}

// Strategy sets how the election picks its leader; names[s] must exist.
func Strategy(s uint8, names []string) Option {
	return candidateOpt("WithStrategy", func(c *Candidate) error {
		if int(s) >= len(names) {
			return fmt.Errorf("WithStrategy(%d): unknown strategy, known: %v", s, names)
		}
		c.Strategy = s
		return nil
	})
}

// Deadline sets how long a leader asked to end its term has before it is
// preempted.
func Deadline(d time.Duration) Option {
	return candidateOpt("WithHandoverDeadline", func(c *Candidate) error {
		if d < MinDeadline || d > MaxDeadline {
			return fmt.Errorf("WithHandoverDeadline(%v): must be at least %v and at most %v", d, MinDeadline, MaxDeadline)
		}
		c.Deadline = d
		return nil
	})
}
