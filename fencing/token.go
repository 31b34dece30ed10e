package fencing

import (
	"fmt"
	"strconv"
	"strings"
)

// Token is a fencing token: the etcd CreateRevision of the holder's key.
// Successive holders of one lock or election get strictly increasing
// tokens; the zero Token means "no token".
type Token int64

// String returns the token in decimal, the form ParseToken reads.
func (t Token) String() string { return strconv.FormatInt(int64(t), 10) }

// IsZero reports whether t is the zero Token.
func (t Token) IsZero() bool { return t == 0 }

// ParseToken reads a token in decimal, as String writes it. Surrounding
// white space is ignored; a sign, a zero, a negative value or anything
// beyond int64 is rejected with an error wrapping ErrMalformed.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("%w: %q has a sign", ErrMalformed, s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a decimal int64", ErrMalformed, s)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: %q is the zero token", ErrMalformed, s)
	}
	return Token(n), nil
}
