package apicheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The files of the record, in the repository's api/ directory.
const (
	NextFile   = "next.txt"   // features added since the last release
	ExceptFile = "except.txt" // removed or changed features a release accepted
)

// Entry is one feature line of a file of the record.
type Entry struct {
	Feature string
	File    string // "api/v0.1.0.txt"
	Line    int
}

func (e Entry) pos() string { return fmt.Sprintf("%s:%d", e.File, e.Line) }

// Release is the file of one release, api/vX.Y.Z.txt: the features it
// added (for the first release, all of them).
type Release struct {
	Version Version
	Entries []Entry
}

// Exception is a line of api/except.txt: a recorded feature that release
// Version removed or changed.
type Exception struct {
	Entry
	Version Version
}

// Section is a "# vX.Y.Z" line of api/except.txt, which heads the
// features that release accepts.
type Section struct {
	Version Version
	Line    int
}

// Record is what api/ holds.
type Record struct {
	Releases []Release // in version order
	Next     []Entry
	Except   []Exception
	Sections []Section
}

// ReadRecord reads the record in dir (the repository's api/ directory).
func ReadRecord(dir string) (Record, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return Record{}, err
	}
	files := map[string]string{}
	for _, de := range des {
		if de.IsDir() || !strings.HasSuffix(de.Name(), ".txt") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			return Record{}, err
		}
		files[de.Name()] = string(b)
	}
	return ParseRecord(files)
}

var sectionRE = regexp.MustCompile(`^#\s*(v[0-9]+\.[0-9]+\.[0-9]+)\b`)

// ParseRecord parses the files of a record, by name: vX.Y.Z.txt for a
// release, next.txt and except.txt. Each holds one feature a line, as
// Features prints them; blank lines and lines starting with # are
// comments, except that in except.txt a comment "# vX.Y.Z ..." names the
// release that accepts the features below it.
func ParseRecord(files map[string]string) (Record, error) {
	var rec Record
	for _, name := range sortedKeys(files) {
		entries, sections, err := parseFile("api/"+name, files[name], name == ExceptFile)
		if err != nil {
			return Record{}, err
		}
		switch name {
		case NextFile:
			rec.Next = entries
		case ExceptFile:
			rec.Sections = sections
			si := 0
			for _, e := range entries {
				for si+1 < len(sections) && sections[si+1].Line < e.Line {
					si++
				}
				if len(sections) == 0 || sections[si].Line > e.Line {
					return Record{}, fmt.Errorf(`%s: a feature before any "# vX.Y.Z" line: name the release that accepts it`, e.pos())
				}
				rec.Except = append(rec.Except, Exception{Entry: e, Version: sections[si].Version})
			}
		default:
			v, err := ParseVersion(strings.TrimSuffix(name, ".txt"))
			if err != nil {
				return Record{}, fmt.Errorf("api/%s: not a file of the record (vX.Y.Z.txt, %s or %s)", name, NextFile, ExceptFile)
			}
			rec.Releases = append(rec.Releases, Release{Version: v, Entries: entries})
		}
	}
	slices.SortFunc(rec.Releases, func(a, b Release) int { return a.Version.Compare(b.Version) })
	return rec, nil
}

func parseFile(name, text string, except bool) ([]Entry, []Section, error) {
	var entries []Entry
	var sections []Section
	seen := map[string]int{}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		switch {
		case strings.HasSuffix(line, "\r"):
			return nil, nil, fmt.Errorf("%s:%d: a carriage return: the record's lines end with \\n alone", name, n)
		case line == "":
			continue
		case strings.HasPrefix(line, "#"):
			if m := sectionRE.FindStringSubmatch(line); except && m != nil {
				v, err := ParseVersion(m[1])
				if err != nil {
					return nil, nil, fmt.Errorf("%s:%d: %v", name, n, err)
				}
				sections = append(sections, Section{Version: v, Line: n})
			}
			continue
		case strings.TrimSpace(line) != line:
			return nil, nil, fmt.Errorf("%s:%d: leading or trailing space in %q", name, n, line)
		case !strings.HasPrefix(line, "pkg ") || !strings.Contains(line, ", "):
			return nil, nil, fmt.Errorf("%s:%d: %q is not a feature (\"pkg PATH, ...\") nor a comment (\"# ...\")", name, n, line)
		}
		if prev, dup := seen[line]; dup {
			return nil, nil, fmt.Errorf("%s:%d: %s is already on line %d", name, n, line, prev)
		}
		seen[line] = n
		entries = append(entries, Entry{Feature: line, File: name, Line: n})
	}
	return entries, sections, nil
}

var (
	headingRE    = regexp.MustCompile(`^##\s`)
	unreleasedRE = regexp.MustCompile(`(?i)^##\s+\[?unreleased\]?`)
	versionInRE  = regexp.MustCompile(`\bv?([0-9]+\.[0-9]+\.[0-9]+)\b`)
)

// Top is CHANGELOG.md's topmost "## " heading, as the check reads it:
// either the Unreleased heading, which announces the next release's
// version ("## [Unreleased] — next: v0.2.0"), or a release's
// ("## [0.1.0] — 2026-12-07").
type Top struct {
	Heading    string   // the line; "" when there is none
	Unreleased bool     // the Unreleased heading
	Version    *Version // the first vX.Y.Z (or X.Y.Z) on it; nil if none
}

// Announced is the version the Unreleased heading announces, or nil.
func (t Top) Announced() *Version {
	if t.Unreleased {
		return t.Version
	}
	return nil
}

// ReadChangelog returns the topmost "## " heading of a CHANGELOG.md.
func ReadChangelog(text string) Top {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if !headingRE.MatchString(line) {
			continue
		}
		t := Top{Heading: line, Unreleased: unreleasedRE.MatchString(line)}
		if m := versionInRE.FindStringSubmatch(line); m != nil {
			if v, err := ParseVersion("v" + m[1]); err == nil {
				t.Version = &v
			}
		}
		return t
	}
	return Top{}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
