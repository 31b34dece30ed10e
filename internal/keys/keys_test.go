package keys

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"simple", "nightly-report", true},
		{"unicode", "überweisung-日次", true},
		{"slash and percent", "jobs/x%2F", true},
		{"exactly max bytes", strings.Repeat("a", MaxNameBytes), true},
		{"max bytes of multibyte runes", strings.Repeat("é", MaxNameBytes/2), true},
		{"empty", "", false},
		{"one byte over", strings.Repeat("a", MaxNameBytes+1), false},
		{"invalid utf8", "a\xffb", false},
		{"newline", "a\nb", false},
		{"nul", "a\x00", false},
		{"del", "a\x7f", false},
		{"c1 control", "a\u0085", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName("name", tt.in)
			if tt.ok && err != nil {
				t.Fatalf("ValidateName(%q) = %v, want nil", tt.in, err)
			}
			if !tt.ok {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("ValidateName(%q) = %v, want ErrInvalid", tt.in, err)
				}
				if !strings.Contains(err.Error(), "name") {
					t.Fatalf("error %q does not name the field", err)
				}
			}
		})
	}
}

func TestValidateNamespace(t *testing.T) {
	for _, ok := range []string{"baton", "team-a", "a.b_c", strings.Repeat("x", MaxNamespaceBytes)} {
		if err := ValidateNamespace(ok); err != nil {
			t.Errorf("ValidateNamespace(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b", "a b", "ü", ".", "..", strings.Repeat("x", MaxNamespaceBytes+1)} {
		if err := ValidateNamespace(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateNamespace(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestPrefixesNeverNest(t *testing.T) {
	pairs := [][2]string{{"jobs", "jobs/x"}, {"a", "a%2F"}, {"a/", "a%2F"}, {"a%", "a%25"}, {"x", "x/"}}
	for _, p := range pairs {
		a, b := Prefix("ns", Lock, p[0]), Prefix("ns", Lock, p[1])
		if a == b || strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
			t.Errorf("prefixes of %q (%s) and %q (%s) nest", p[0], a, p[1], b)
		}
	}
}

func TestParseRoundTrip(t *testing.T) {
	key := LeaseKey(Prefix("team", Election, "a/b%c"), 0x694d8c1a2b)
	got, err := Parse("team", key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != Election || got.Name != "a/b%c" || got.Lease != 0x694d8c1a2b {
		t.Fatalf("Parse(%q) = %+v", key, got)
	}
	for _, bad := range []string{"/other/v1/lock/a/1", "/team/v1/lock/a", "/team/v1/lock/a/zz", "/team/v1/lock/a%2/1", "/team/v1/lock/a/01"} {
		if _, err := Parse("team", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a", "a/b", "%", "%2F", "%25", "日本/語", "a%2Fb/"} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := Escape(a), Escape(b)
		if strings.Contains(ea, "/") {
			t.Fatalf("Escape(%q) = %q contains '/'", a, ea)
		}
		back, err := Unescape(ea)
		if err != nil || back != a {
			t.Fatalf("Unescape(Escape(%q)) = %q, %v", a, back, err)
		}
		if a != b && ea == eb {
			t.Fatalf("Escape(%q) == Escape(%q) == %q", a, b, ea)
		}
		if a != b {
			pa, pb := Prefix("n", Lock, a), Prefix("n", Lock, b)
			if strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa) {
				t.Fatalf("prefixes of %q and %q nest: %q %q", a, b, pa, pb)
			}
		}
	})
}

func FuzzUnescape(f *testing.F) {
	for _, s := range []string{"", "a", "%2F", "%25", "%", "%2", "%zz", "a%2Fb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		name, err := Unescape(seg)
		if err != nil {
			return
		}
		if Escape(name) != seg {
			t.Fatalf("Unescape(%q) = %q but Escape gives %q: two segments decode to one name", seg, name, Escape(name))
		}
	})
}

func TestNamespaceOf(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"/baton/v1/lock/x/694d9a3e1b4e3c25", "/baton/v1/"},
		{"/baton/v1/", "/baton/v1/"},
		{"/baton/v1", "/baton/v1"},
		{"/", "/"},
		{"", ""},
		{"a/b/c/d", "/b/c/"},
	} {
		if got := NamespaceOf(tc.key); got != tc.want {
			t.Errorf("NamespaceOf(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = NamespaceOf("/baton/v1/lock/x/1") }); n != 0 {
		t.Errorf("NamespaceOf allocates %v times per call on a key of the layout", n)
	}
}

// FuzzNamespaceOf checks the allocation-free path against the plain
// definition: "/" + the first two segments after the first slash + "/".
func FuzzNamespaceOf(f *testing.F) {
	for _, s := range []string{"/ns/v1/lock/a/1", "/ns/v1", "//", "a/b/c/d", "/a//b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := key
		if parts := strings.SplitN(key, "/", 4); len(parts) >= 4 {
			want = "/" + parts[1] + "/" + parts[2] + "/"
		}
		if got := NamespaceOf(key); got != want {
			t.Fatalf("NamespaceOf(%q) = %q, want %q", key, got, want)
		}
	})
}

// The two release marks, and nothing else, are marks: not another
// namespace's, nor a lock whose name is "released".
func TestIsReleased(t *testing.T) {
	for key, want := range map[string]bool{
		"/ns/v1/released":             true,
		"/ns/v1/released-b":           true,
		"/other/v1/released":          true,
		"/ns/v1/released-c":           false,
		"/ns/v1/lock/released/1a":     false,
		"/ns/v1/lock/released-b/1a":   false,
		"/ns/v1/":                     false,
		"/ns/v1":                      false,
		"ns/v1/released":              false,
		"":                            false,
		"/ns/v1/releasedx":            false,
		"/ns/v1/released/":            false,
		"/ns/audit/v1/released":       false,
		"/ns/v1/candidate/x/released": false,
	} {
		if got := IsReleased(key); got != want {
			t.Errorf("IsReleased(%q) = %v, want %v", key, got, want)
		}
		if want && (IsReleased(key) != (key == ReleasedKey(key) || key == ReleasedAltKey(key))) {
			t.Errorf("IsReleased(%q) disagrees with ReleasedKey and ReleasedAltKey", key)
		}
	}
	if n := testing.AllocsPerRun(100, func() { IsReleased("/ns/v1/lock/some-long-name-over-thirty-two-bytes/1a2b3c") }); n != 0 {
		t.Errorf("IsReleased allocates %v times, want 0", n)
	}
}

func TestAuditTrailLiesOutsideTheNamespace(t *testing.T) {
	ns := "team"
	audit, req := AuditPrefix(ns), RequestAuditPrefix(ns)
	if audit != "/team/audit/v1/" || req != "/team/audit/v1/request/" {
		t.Fatalf("AuditPrefix = %q, RequestAuditPrefix = %q", audit, req)
	}
	if strings.HasPrefix(audit, NamespacePrefix(ns)) || strings.HasPrefix(NamespacePrefix(ns), audit) {
		t.Errorf("audit trail %s and namespace %s nest: the contenders' grant would cover the trail", audit, NamespacePrefix(ns))
	}
	if !strings.HasPrefix(req, audit) {
		t.Errorf("request records %s are not in the trail %s", req, audit)
	}
}
