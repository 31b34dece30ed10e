package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

func TestSafeQuotesOnlyWhatATerminalWouldMisread(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"host-a:4242", "host-a:4242"},
		{"jobs/nightly run", "jobs/nightly run"},
		{"Zürich ✓", "Zürich ✓"},
		{"", ""},
		{"a\x1b[2Jb", `"a\x1b[2Jb"`},
		{"ok\rFAKE", `"ok\rFAKE"`},
		{"one\ntwo", `"one\ntwo"`},
		{"tab\there", `"tab\there"`},
		{"abc\u202edcb", `"abc\u202edcb"`},
		{"zero\u200bwidth", `"zero\u200bwidth"`},
		{"bom\ufeff", `"bom\ufeff"`},
		{"line\u2028sep", `"line\u2028sep"`},
		{"bad\xffutf8", `"bad\xffutf8"`},
		{`"already quoted"`, `"\"already quoted\""`},
	} {
		if got := cmdutil.Safe(c.in); got != c.want {
			t.Errorf("safe(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestSafeMessageEscapesInPlace(t *testing.T) {
	in := "lock \"x\": etcd said \x1b[31mno\x1b[0m\nforged\u202e line \xff"
	want := `lock "x": etcd said \x1b[31mno\x1b[0m\nforged\u202e line \xff`
	if got := cmdutil.SafeMessage(in); got != want {
		t.Errorf("safeMessage = %s, want %s", got, want)
	}
}

func TestEscapeJSONKeepsTheDocumentAndHidesNothing(t *testing.T) {
	v := map[string]string{"value": "a\x1b\r\n\u202e\u200b\u2028\U000E0001z"}
	b, _ := json.Marshal(v)
	out := cmdutil.EscapeJSON(b)
	for _, r := range string(out) {
		if r >= utf8.RuneSelf || unicode.IsControl(r) {
			t.Fatalf("raw %U left in %s", r, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["value"] != v["value"] {
		t.Fatalf("escaped JSON reads back as %q, %v", back["value"], err)
	}
}

func FuzzSafeLeavesNoUnsafeRune(f *testing.F) {
	for _, s := range []string{"plain", "a\x1b[2J", "\u202e", "\xff\xfe", `"q"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		js, _ := json.Marshal(s)
		for _, out := range []string{cmdutil.Safe(s), cmdutil.SafeMessage(s), string(cmdutil.EscapeJSON(js))} {
			if strings.ContainsFunc(out, cmdutil.UnsafeRune) && utf8.ValidString(out) {
				t.Fatalf("unsafe rune left in %q (from %q)", out, s)
			}
		}
		if cmdutil.NeedsQuote(s) != (cmdutil.Safe(s) != s) {
			t.Fatalf("safe(%q) = %q: quoted iff needed", s, cmdutil.Safe(s))
		}
	})
}

func TestGlobalFlagsFromEnvironment(t *testing.T) {
	env := map[string]string{
		"BATON_NAMESPACE":       "from-env",
		"BATON_DIAL_TIMEOUT":    "750ms",
		"BATON_OUTPUT":          "json",
		"BATON_ENDPOINTS":       " 127.0.0.1:1, 127.0.0.1:2 ,",
		"BATON_COMMAND_TIMEOUT": "9s",
	}
	_, g := newRoot(cmdutil.IO{Getenv: func(k string) string { return env[k] }})
	if g.Namespace != "from-env" || g.DialTimeout.String() != "750ms" || g.Output != "json" ||
		strings.Join(g.Endpoints, ",") != "127.0.0.1:1,127.0.0.1:2" || g.CommandTimeout.String() != "9s" {
		t.Fatalf("globals from the environment: %+v", g)
	}
	// A flag wins over its variable, and replaces a list rather than
	// appending to it.
	root, g := newRoot(cmdutil.IO{Getenv: func(k string) string { return env[k] }})
	if err := root.ParseFlags([]string{"--namespace", "flag", "--endpoints", "127.0.0.9:9"}); err != nil {
		t.Fatal(err)
	}
	if g.Namespace != "flag" || strings.Join(g.Endpoints, ",") != "127.0.0.9:9" {
		t.Fatalf("flags did not win: namespace %q endpoints %v", g.Namespace, g.Endpoints)
	}
	// Every global flag has its variable, and says so in --help.
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(f.Usage, cmdutil.EnvName(f.Name)) {
			t.Errorf("--%s does not mention %s", f.Name, cmdutil.EnvName(f.Name))
		}
	})
}
