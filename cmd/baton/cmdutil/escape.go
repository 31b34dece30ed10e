package cmdutil

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Untrusted text (names, values, identities, reasons, keys, etcd's error
// texts) reaches a terminal only through safe, or, for a whole message,
// safeMessage: a control or format character could otherwise move the
// cursor, end a line, reorder text (U+202E) or hide itself (U+200B), and
// make a table or an audit row lie.

// UnsafeRune reports whether r must never reach a terminal raw: controls
// (Cc: ESC, CR, LF, TAB...), format characters (Cf: bidi overrides and
// isolates, zero-width characters, BOM), line and paragraph separators,
// and the replacement for invalid UTF-8.
func UnsafeRune(r rune) bool {
	return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) || r == utf8.RuneError
}

// Safe returns s unchanged when every character is harmless, and
// otherwise s as a Go quoted string, every unsafe character escaped
// (\x1b, \n, \u202e). A harmless s that starts with a quote is quoted too,
// so that no raw text can pass for an escaped one.
func Safe(s string) string {
	if NeedsQuote(s) {
		return strconv.QuoteToGraphic(s)
	}
	return s
}

func NeedsQuote(s string) bool {
	if strings.HasPrefix(s, `"`) {
		return true
	}
	for _, r := range s {
		if UnsafeRune(r) {
			return true
		}
	}
	return false
}

// SafeQ is safe that always quotes, for text that is quoted in the output
// anyway (lock "NAME").
func SafeQ(s string) string { return strconv.QuoteToGraphic(s) }

// SafeMessage escapes the unsafe characters of a whole message (an error
// that may carry a name or etcd's text) in place, without quoting it.
func SafeMessage(s string) string {
	if !strings.ContainsFunc(s, UnsafeRune) {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case UnsafeRune(r):
			q := strconv.QuoteRuneToGraphic(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
	}
	return b.String()
}

// EscapeJSON rewrites the characters encoding/json leaves raw (it escapes
// controls below U+0020, U+2028 and U+2029, not DEL nor format
// characters) as \uXXXX, so
// that JSON printed to a terminal cannot reorder or hide text either. The
// document means the same: outside strings JSON is ASCII.
func EscapeJSON(b []byte) []byte {
	if !bytes.ContainsFunc(b, jsonLeavesRaw) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if jsonLeavesRaw(r) {
			if r > 0xFFFF {
				r1, r2 := utf16Pair(r)
				out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}

func jsonLeavesRaw(r rune) bool { return r == 0x7f || r >= utf8.RuneSelf && UnsafeRune(r) }

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF
}
