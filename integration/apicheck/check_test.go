package apicheck

import (
	"slices"
	"strings"
	"testing"
)

// Made-up features: the checker compares lines, whatever they declare.
const (
	fA = "pkg p, func A()"
	fB = "pkg p, func B(int) error"
	fC = "pkg p, func C()"
)

func lines(fs ...string) string { return strings.Join(fs, "\n") + "\n" }

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		files     map[string]string // api/ by file name
		current   []string
		announced string // the version CHANGELOG.md's Unreleased heading announces, if any
		changelog string // else CHANGELOG.md
		want      [][]string
	}{{
		name:    "the API as recorded passes",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB)},
		current: []string{fA, fB},
	}, {
		name:    "an addition listed in next.txt passes",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB), "next.txt": lines(fC)},
		current: []string{fA, fB, fC},
	}, {
		name:    "an addition not in next.txt fails",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB)},
		current: []string{fA, fB, fC},
		want:    [][]string{{"not recorded: " + fC, "not in api/next.txt", "run make api"}},
	}, {
		name:      "an addition announced for a patch release fails",
		files:     map[string]string{"v0.1.0.txt": lines(fA, fB), "next.txt": lines(fC)},
		current:   []string{fA, fB, fC},
		announced: "v0.1.1",
		want:      [][]string{{"CHANGELOG.md announces v0.1.1, a patch release after v0.1.0", "first: " + fC, "announce v0.2.0 instead"}},
	}, {
		name:      "an addition announced for a minor release passes",
		files:     map[string]string{"v0.1.0.txt": lines(fA, fB), "next.txt": lines(fC)},
		current:   []string{fA, fB, fC},
		announced: "v0.2.0",
	}, {
		name:    "a recorded patch release that added API fails",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB), "v0.1.1.txt": lines(fA, fB, fC)},
		current: []string{fA, fB, fC},
		want:    [][]string{{"api/v0.1.1.txt:3: v0.1.1 adds " + fC + " after v0.1.0, but a patch release adds no API"}},
	}, {
		name:    "a removal without a bump fails",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB)},
		current: []string{fA},
		want:    [][]string{{"api/v0.1.0.txt:2: removed or changed: " + fB, `add this line to api/except.txt under "# v0.2.0"`, "announce v0.2.0 in CHANGELOG.md", "before v1 only a minor release"}},
	}, {
		name:      "a removal with a minor bump before v1 passes",
		files:     map[string]string{"v0.1.0.txt": lines(fA, fB), "except.txt": lines("# v0.2.0: B goes", fB)},
		current:   []string{fA},
		announced: "v0.2.0",
	}, {
		name:      "a removal with a patch bump before v1 fails",
		files:     map[string]string{"v0.1.0.txt": lines(fA, fB), "except.txt": lines("# v0.1.1", fB)},
		current:   []string{fA},
		announced: "v0.1.1",
		want: [][]string{
			{"api/except.txt:1:", "CHANGELOG.md announces v0.1.1, which may not remove or change API after v0.1.0", "before v1 only a minor release (v0.2.0)"},
			{"api/v0.1.0.txt:2: removed or changed: " + fB, `api/except.txt:2 accepts it under "# v0.1.1", a release that may not remove or change API (api/except.txt:1 says why)`},
		},
	}, {
		name:    "a removal in except.txt that CHANGELOG.md does not announce fails",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB), "except.txt": lines("# v0.2.0", fB)},
		current: []string{fA},
		want: [][]string{
			{"api/except.txt:1:", "v0.2.0 is neither a release recorded in api/ nor the version CHANGELOG.md's Unreleased heading announces (no version)"},
			{"removed or changed: " + fB},
		},
	}, {
		name:      "a removal under another version than the announced one fails",
		files:     map[string]string{"v0.1.0.txt": lines(fA, fB), "except.txt": lines("# v0.3.0", fB)},
		current:   []string{fA},
		announced: "v0.2.0",
		want: [][]string{
			{"v0.3.0 is neither a release recorded in api/ nor the version CHANGELOG.md's Unreleased heading announces (v0.2.0)"},
			{"removed or changed: " + fB},
		},
	}, {
		name:      "from v1 a minor bump may not remove",
		files:     map[string]string{"v1.0.0.txt": lines(fA, fB), "except.txt": lines("# v1.1.0", fB)},
		current:   []string{fA},
		announced: "v1.1.0",
		want: [][]string{
			{"may not remove or change API after v1.0.0", "from v1 only a major release (v2.0.0)"},
			{"removed or changed: " + fB},
		},
	}, {
		name:      "from v1 a major bump may remove",
		files:     map[string]string{"v1.0.0.txt": lines(fA, fB), "except.txt": lines("# v2.0.0", fB)},
		current:   []string{fA},
		announced: "v2.0.0",
	}, {
		name:      "v1.0.0 may remove what a v0 release recorded",
		files:     map[string]string{"v0.3.0.txt": lines(fA, fB), "except.txt": lines("# v1.0.0", fB)},
		current:   []string{fA},
		announced: "v1.0.0",
	}, {
		name:    "a removal without a bump after v1 suggests the next major",
		files:   map[string]string{"v1.2.0.txt": lines(fA, fB)},
		current: []string{fA},
		want:    [][]string{{"removed or changed: " + fB, `under "# v2.0.0"`, "from v1 only a major release (v2.0.0)"}},
	}, {
		name:    "a changed signature names what the API now has",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB), "next.txt": lines("pkg p, func B(string) error")},
		current: []string{fA, "pkg p, func B(string) error"},
		want:    [][]string{{"removed or changed: " + fB, "the API now has: pkg p, func B(string) error"}},
	}, {
		name: "a method added to an interface is a change",
		files: map[string]string{
			"v0.1.0.txt": lines("pkg p, type I interface { M }", "pkg p, type I interface, M()"),
			"next.txt":   lines("pkg p, type I interface { M, N }", "pkg p, type I interface, N()"),
		},
		current: []string{"pkg p, type I interface { M, N }", "pkg p, type I interface, M()", "pkg p, type I interface, N()"},
		want:    [][]string{{"removed or changed: pkg p, type I interface { M }", "the API now has: pkg p, type I interface { M, N }"}},
	}, {
		name:    "an exception of a recorded minor release stays valid",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB), "v0.2.0.txt": "", "except.txt": lines("# v0.2.0", fB)},
		current: []string{fA},
	}, {
		name:    "an exception of a recorded patch release fails",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB), "v0.1.1.txt": "", "except.txt": lines("# v0.1.1", fB)},
		current: []string{fA},
		want: [][]string{
			{"release v0.1.1, after v0.1.0, may not have removed or changed API"},
			{"removed or changed: " + fB},
		},
	}, {
		name:    "a feature added back after its removal must be in next.txt",
		files:   map[string]string{"v0.1.0.txt": lines(fA, fB), "v0.2.0.txt": "", "except.txt": lines("# v0.2.0", fB)},
		current: []string{fA, fB},
		want:    [][]string{{"not recorded: " + fB}},
	}, {
		name: "an old exception does not excuse removing a feature added back since",
		files: map[string]string{
			"v0.1.0.txt": lines(fA, fB), "v0.2.0.txt": "", "v0.3.0.txt": lines(fB),
			"except.txt": lines("# v0.2.0", fB),
		},
		current:   []string{fA},
		announced: "v0.3.1",
		want:      [][]string{{"api/v0.3.0.txt:1: removed or changed: " + fB, `under "# v0.4.0"`}},
	}, {
		name:    "next.txt listing a feature the API lacks fails",
		files:   map[string]string{"v0.1.0.txt": lines(fA), "next.txt": lines(fC)},
		current: []string{fA},
		want:    [][]string{{"api/next.txt:1: " + fC + " is not in the API", "run make api"}},
	}, {
		name:    "next.txt listing a recorded feature fails",
		files:   map[string]string{"v0.1.0.txt": lines(fA), "next.txt": lines(fA)},
		current: []string{fA},
		want:    [][]string{{"api/next.txt:1: " + fA + " is already recorded in api/v0.1.0.txt", "run make api"}},
	}, {
		name:      "an exception of a feature no release recorded fails",
		files:     map[string]string{"v0.1.0.txt": lines(fA), "except.txt": lines("# v0.2.0", fC)},
		current:   []string{fA},
		announced: "v0.2.0",
		want:      [][]string{{"api/except.txt:2: no release before v0.2.0 recorded " + fC, "remove the line"}},
	}, {
		name:      "an exception of a feature still in the API fails",
		files:     map[string]string{"v0.1.0.txt": lines(fA, fB), "except.txt": lines("# v0.2.0", fB)},
		current:   []string{fA, fB},
		announced: "v0.2.0",
		want:      [][]string{{"api/except.txt:2: " + fB + " is still in the API", "remove the line from api/except.txt"}},
	}, {
		name:      "an announced version that is not after the last release fails",
		files:     map[string]string{"v0.1.0.txt": lines(fA, fB), "v0.2.0.txt": "", "except.txt": lines("# v0.1.5", fB)},
		current:   []string{fA},
		announced: "v0.1.5",
		want: [][]string{
			{"CHANGELOG.md announces v0.1.5, which is not after the last release recorded, v0.2.0"},
			{"removed or changed: " + fB},
		},
	}, {
		name:    "with no release yet, every feature must be in next.txt",
		files:   map[string]string{"next.txt": lines(fA)},
		current: []string{fA, fB},
		want:    [][]string{{"not recorded: " + fB}},
	}, {
		name:      "a release CHANGELOG.md heads with is recorded",
		files:     map[string]string{"v0.1.0.txt": lines(fA), "v0.2.0.txt": lines(fB)},
		current:   []string{fA, fB},
		changelog: "# Changelog\n\n## [0.2.0] — 2027-01-10\n\n## [0.1.0] — 2026-12-07\n",
	}, {
		name:      "a release CHANGELOG.md heads with but api/ does not record fails",
		files:     map[string]string{"v0.1.0.txt": lines(fA), "next.txt": lines(fB)},
		current:   []string{fA, fB},
		changelog: "# Changelog\n\n## [0.2.0] — 2027-01-10\n\n## [0.1.0] — 2026-12-07\n",
		want:      [][]string{{`CHANGELOG.md: "## [0.2.0] — 2027-01-10" is release v0.2.0, which api/ does not record`, "git mv api/next.txt api/v0.2.0.txt"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := ParseRecord(tc.files)
			if err != nil {
				t.Fatal(err)
			}
			top := ReadChangelog(tc.changelog)
			if tc.announced != "" {
				top = ReadChangelog("## [Unreleased] — next: " + tc.announced)
			}
			got := Check(tc.current, rec, top)
			for _, p := range got {
				t.Log(p)
			}
			for i, want := range tc.want {
				if i >= len(got) {
					t.Errorf("problem %d missing: want one with %q", i, want)
					continue
				}
				for _, s := range want {
					if !strings.Contains(got[i], s) {
						t.Errorf("problem %d does not say %q:\n%s", i, s, got[i])
					}
				}
			}
			for _, p := range got[min(len(got), len(tc.want)):] {
				t.Errorf("unexpected problem:\n%s", p)
			}
		})
	}
}

func TestNextListsWhatNoReleaseRecords(t *testing.T) {
	rec, err := ParseRecord(map[string]string{
		"v0.1.0.txt": lines(fA, fB), "v0.2.0.txt": "", "except.txt": lines("# v0.2.0", fB),
	})
	if err != nil {
		t.Fatal(err)
	}
	// C is new; B was removed in v0.2.0 and is back.
	got := Next([]string{fC, fB, fA}, rec)
	if want := []string{fB, fC}; !slices.Equal(got, want) {
		t.Errorf("Next = %q, want %q", got, want)
	}
}

func TestMayBreak(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"v0.1.0", "v0.1.1", false},
		{"v0.1.0", "v0.2.0", true},
		{"v0.1.3", "v0.2.0", true},
		{"v0.1.0", "v1.0.0", true},
		{"v0.2.0", "v0.1.9", false},
		{"v0.2.0", "v0.2.0", false},
		{"v1.0.0", "v1.0.1", false},
		{"v1.0.0", "v1.1.0", false},
		{"v1.4.2", "v2.0.0", true},
		{"v2.0.0", "v1.9.0", false},
	} {
		from, _ := ParseVersion(tc.from)
		to, _ := ParseVersion(tc.to)
		if got := MayBreak(from, to); got != tc.want {
			t.Errorf("MayBreak(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestIdentity(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"pkg p, func F(int)", "pkg p, func F(string) error"},
		{"pkg p, func G[$0 interface{}]($0)", "pkg p, func G[$0 comparable]($0)"},
		{"pkg p, method (*T) M()", "pkg p, method (T) M() error"},
		{"pkg p, method (*Set[$0, $1]) Put($0, $1)", "pkg p, method (*Set[$0]) Put($0)"},
		{"pkg p, type T struct, F int", "pkg p, type T struct, F string"},
		{"pkg p, type S[$0 comparable, $1 interface{}] struct, M map[$0]$1", "pkg p, type S[$0 comparable] struct, M map[$0]int"},
		{"pkg p, type I interface, M()", "pkg p, type I interface, M(int)"},
		{"pkg p, type I interface { M }", "pkg p, type I interface { M, N }"},
		{"pkg p, const C = 1", "pkg p, const C = 2"},
		{"pkg p, var V int", "pkg p, var V int64"},
	} {
		if identity(tc.a) != identity(tc.b) {
			t.Errorf("identity(%q) = %q, identity(%q) = %q: want the same", tc.a, identity(tc.a), tc.b, identity(tc.b))
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"pkg p, func F()", "pkg q, func F()"},
		{"pkg p, func F()", "pkg p, func FF()"},
		{"pkg p, method (*T) M()", "pkg p, method (*U) M()"},
		{"pkg p, type T struct, F int", "pkg p, type U struct, F int"},
		{"pkg p, type T struct, F int", "pkg p, type T struct, G int"},
	} {
		if identity(tc.a) == identity(tc.b) {
			t.Errorf("identity(%q) = identity(%q) = %q: want them apart", tc.a, tc.b, identity(tc.a))
		}
	}
}
