package hold

import (
	"errors"
	"strings"
	"testing"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

// Status lines of lock and elect escape format characters (bidi overrides,
// zero-width) as well as controls, as every other output does.
func TestStatusLinesEscapeFormatAndControlCharacters(t *testing.T) {
	var b strings.Builder
	st := newStatusWriter(&b, false, "lock", "x")
	st.unreachableNow(errors.New("etcd said \u202egnp.exe\u200b\x1b[2J\nbaton: forged"))
	st.lost(errors.New("lost \u202eevil\r"), false)
	out := b.String()
	if strings.ContainsFunc(out, func(r rune) bool { return cmdutil.UnsafeRune(r) && r != '\n' }) || strings.Count(out, "\n") != 2 {
		t.Errorf("status lines carry raw control or format characters: %q", out)
	}
	for _, want := range []string{`\u202e`, `\u200b`, `\x1b`, `\n`, `\r`} {
		if !strings.Contains(out, want) {
			t.Errorf("status lines %q lack the escape %s", out, want)
		}
	}
}
