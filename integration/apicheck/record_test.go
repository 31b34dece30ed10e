package apicheck

import (
	"strings"
	"testing"
)

func TestParseRecordReadsSectionsOfExcept(t *testing.T) {
	rec, err := ParseRecord(map[string]string{
		"v0.2.0.txt": lines(fC),
		"v0.1.0.txt": lines("# the first release", fA, "", fB),
		"next.txt":   "",
		"except.txt": lines("# Features removed.", "", "# v0.2.0: A goes", fA, "# a note", "# v0.3.0", fB),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Releases) != 2 || rec.Releases[0].Version.String() != "v0.1.0" || rec.Releases[1].Version.String() != "v0.2.0" {
		t.Fatalf("releases = %+v, want v0.1.0 then v0.2.0", rec.Releases)
	}
	if e := rec.Releases[0].Entries; len(e) != 2 || e[1].Feature != fB || e[1].Line != 4 || e[1].File != "api/v0.1.0.txt" {
		t.Errorf("v0.1.0 entries = %+v", e)
	}
	x := rec.Except
	if len(x) != 2 || x[0].Feature != fA || x[0].Version.String() != "v0.2.0" || x[1].Feature != fB || x[1].Version.String() != "v0.3.0" {
		t.Errorf("except = %+v, want A under v0.2.0 and B under v0.3.0", x)
	}
}

func TestParseRecordRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"a feature before any version in except.txt", map[string]string{"except.txt": lines("# removed", fA)},
			`api/except.txt:2: a feature before any "# vX.Y.Z" line`},
		{"a line that is not a feature", map[string]string{"next.txt": lines("func A()")},
			`api/next.txt:1: "func A()" is not a feature`},
		{"a duplicate", map[string]string{"v0.1.0.txt": lines(fA, fB, fA)},
			"api/v0.1.0.txt:3: pkg p, func A() is already on line 1"},
		{"a trailing space", map[string]string{"v0.1.0.txt": lines(fA + " ")},
			"api/v0.1.0.txt:1: leading or trailing space"},
		{"a carriage return", map[string]string{"v0.1.0.txt": "pkg p, func A()\r\n"},
			"api/v0.1.0.txt:1: a carriage return"},
		{"an unknown file", map[string]string{"v0.1.txt": ""},
			"api/v0.1.txt: not a file of the record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRecord(tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseRecord: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestReadChangelog(t *testing.T) {
	for _, tc := range []struct {
		name, changelog    string
		announced, release string // "" for none
	}{
		{"the format of docs/api-policy.md", "# Changelog\n\n## [Unreleased] — next: v0.2.0\n\n### Removed\n\n## [0.1.0] — 2026-12-07\n", "v0.2.0", ""},
		{"other separators", "## [Unreleased] - v1.0.0\n", "v1.0.0", ""},
		{"without brackets", "## Unreleased (next: v0.3.0)\n", "v0.3.0", ""},
		{"without the v", "## [Unreleased] — next: 0.4.1\n", "v0.4.1", ""},
		{"CRLF line ends", "# Changelog\r\n## [Unreleased] — next: v0.2.0\r\n", "v0.2.0", ""},
		{"an Unreleased heading without a version", "## [Unreleased]\n## [0.1.0] — v0.1.0\n", "", ""},
		{"a release on top", "## [0.1.0] — 2026-12-07\n## [Unreleased] — next: v0.2.0\n", "", "v0.1.0"},
		{"a release on top, with a v", "## v1.2.3 (2027-03-01)\n", "", "v1.2.3"},
		{"a version in the text, not the heading", "# Changelog\nnext: v0.2.0\n## [Unreleased]\n", "", ""},
		{"no heading", "# Changelog\n", "", ""},
		{"a version that is not one", "## [Unreleased] — next: v0.2\n", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := ReadChangelog(tc.changelog)
			announced, release := "", ""
			if v := top.Announced(); v != nil {
				announced = v.String()
			}
			if !top.Unreleased && top.Version != nil {
				release = top.Version.String()
			}
			if announced != tc.announced || release != tc.release {
				t.Errorf("ReadChangelog = %+v: announces %q, heads with release %q; want %q, %q", top, announced, release, tc.announced, tc.release)
			}
		})
	}
}
