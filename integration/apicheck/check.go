package apicheck

import (
	"fmt"
	"slices"
	"strings"
)

// history is what the record says of one feature: the last release that
// recorded it, and the last exception that accepted its removal.
type history struct {
	added   *Release
	line    Entry
	removed *Exception
}

// present reports whether the record holds f as API: a release recorded
// it, and no later release accepted its removal.
func (h history) present() bool {
	return h.added != nil && (h.removed == nil || h.removed.Version.Compare(h.added.Version) <= 0)
}

func histories(rec Record) map[string]*history {
	hs := map[string]*history{}
	get := func(f string) *history {
		if hs[f] == nil {
			hs[f] = &history{}
		}
		return hs[f]
	}
	for i := range rec.Releases {
		r := &rec.Releases[i]
		for _, e := range r.Entries {
			h := get(e.Feature)
			h.added, h.line = r, e // releases are in version order
		}
	}
	for i := range rec.Except {
		x := &rec.Except[i]
		h := get(x.Feature)
		if h.removed == nil || x.Version.Compare(h.removed.Version) > 0 {
			h.removed = x
		}
	}
	return hs
}

// Next returns what api/next.txt must hold: the features of current that
// no release records (or that a release removed, and that came back).
func Next(current []string, rec Record) []string {
	hs := histories(rec)
	var out []string
	for _, f := range current {
		if h := hs[f]; h == nil || !h.present() {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// Check compares the current API (Features' lines) with the record, given
// CHANGELOG.md's topmost heading (which may announce the next release). It
// returns one message per problem, each naming the feature or the line of
// the record it is about and saying what to do; none when the change keeps
// the policy (docs/api-policy.md):
//
//   - every feature a release recorded is in the current API, unless
//     api/except.txt accepts its removal under a later release that may
//     break API (before v1 a minor release, from v1 a major one): a release
//     already recorded, or the one CHANGELOG.md announces;
//   - every current feature that no release records is in api/next.txt,
//     and next.txt holds nothing else;
//   - every line of except.txt accepts the removal of a feature an earlier
//     release recorded;
//   - a release CHANGELOG.md heads with has its file in api/.
func Check(current []string, rec Record, top Top) []string {
	var out []string
	announced := top.Announced()
	hs := histories(rec)
	cur := map[string]bool{}
	for _, f := range current {
		cur[f] = true
	}
	var latest *Version
	if n := len(rec.Releases); n > 0 {
		latest = &rec.Releases[n-1].Version
	}
	released := func(v Version) *Release {
		for i := range rec.Releases {
			if rec.Releases[i].Version == v {
				return &rec.Releases[i]
			}
		}
		return nil
	}

	if v := top.Version; !top.Unreleased && v != nil && released(*v) == nil {
		out = append(out, fmt.Sprintf("CHANGELOG.md: %q is release %s, which api/ does not record: at a release, git mv api/%s api/%s.txt and start an empty api/%s",
			top.Heading, *v, NextFile, *v, NextFile))
	}

	// Each release named in except.txt must be one that may break API.
	sectionOK := map[Version]bool{}
	for _, s := range rec.Sections {
		if _, done := sectionOK[s.Version]; done {
			continue
		}
		problem := ""
		v := s.Version
		switch {
		case released(v) != nil:
			var prev *Version
			for i := range rec.Releases {
				if rec.Releases[i].Version.Compare(v) < 0 {
					prev = &rec.Releases[i].Version
				}
			}
			switch {
			case prev == nil:
				problem = fmt.Sprintf("%s is the first release recorded: it has no API to remove", v)
			case !MayBreak(*prev, v):
				problem = fmt.Sprintf("release %s, after %s, may not have removed or changed API: %s", v, *prev, breakRule(*prev))
			}
		case announced != nil && *announced == v:
			switch {
			case latest == nil:
				problem = fmt.Sprintf("no release is recorded (api/vX.Y.Z.txt): %s has no API to remove", v)
			case v.Compare(*latest) <= 0:
				problem = fmt.Sprintf("CHANGELOG.md announces %s, which is not after the last release recorded, %s: announce a later release", v, *latest)
			case !MayBreak(*latest, v):
				problem = fmt.Sprintf("CHANGELOG.md announces %s, which may not remove or change API after %s: %s; announce %s in CHANGELOG.md and name it here, or restore the features below",
					v, *latest, breakRule(*latest), NextBreaking(*latest))
			}
		default:
			ann := "no version"
			if announced != nil {
				ann = announced.String()
			}
			problem = fmt.Sprintf("%s is neither a release recorded in api/ nor the version CHANGELOG.md's Unreleased heading announces (%s): announce it there (## [Unreleased] — next: %s), or, if %s is out, git mv api/%s api/%s.txt", v, ann, v, v, NextFile, v)
		}
		sectionOK[v] = problem == ""
		if problem != "" {
			out = append(out, fmt.Sprintf("api/%s:%d: %q: %s", ExceptFile, s.Line, "# "+v.String(), problem))
		}
	}

	// A patch release fixes; it adds no identifier (docs/releasing.md).
	if announced != nil && latest != nil && IsPatch(*latest, *announced) && len(rec.Next) > 0 {
		out = append(out, fmt.Sprintf("CHANGELOG.md announces %s, a patch release after %s, but api/%s records %d new feature(s) (first: %s): a patch adds no API; announce %s instead",
			*announced, *latest, NextFile, len(rec.Next), rec.Next[0].Feature, Version{latest.Major, latest.Minor + 1, 0}))
	}
	for i := 1; i < len(rec.Releases); i++ {
		prev, r := rec.Releases[i-1], rec.Releases[i]
		if !IsPatch(prev.Version, r.Version) {
			continue
		}
		had := map[string]bool{}
		for _, e := range prev.Entries {
			had[e.Feature] = true
		}
		for _, e := range r.Entries {
			if !had[e.Feature] {
				out = append(out, fmt.Sprintf("%s:%d: %s adds %s after %s, but a patch release adds no API", e.File, e.Line, r.Version, e.Feature, prev.Version))
				break
			}
		}
	}

	// What to tell whoever removes a feature: the release that may.
	target := Version{0, 1, 0}
	if latest != nil {
		target = NextBreaking(*latest)
		if announced != nil && MayBreak(*latest, *announced) {
			target = *announced
		}
	}

	for _, f := range sortedKeys(hs) {
		h := hs[f]
		switch {
		case h.present() && !cur[f]:
			msg := fmt.Sprintf("%s: removed or changed: %s", h.line.pos(), f)
			if now := sameIdentity(f, current, hs); len(now) > 0 {
				msg += "\n\tthe API now has: " + strings.Join(now, "\n\t                 ")
			}
			msg += fmt.Sprintf("\n\trestore it; or, to break it on purpose, add this line to api/%s under \"# %s\" and announce %s in CHANGELOG.md (## [Unreleased] — next: %s)",
				ExceptFile, target, target, target)
			if latest != nil {
				msg += ": " + breakRule(*latest)
			}
			out = append(out, msg)
		case h.removed != nil && h.added != nil && !h.present() && !cur[f] && !sectionOK[h.removed.Version]:
			out = append(out, fmt.Sprintf("%s: removed or changed: %s\n\t%s accepts it under \"# %s\", a release that may not remove or change API (api/%s:%d says why)",
				h.line.pos(), f, h.removed.pos(), h.removed.Version, ExceptFile, sectionLine(rec, h.removed.Version)))
		case h.removed != nil && !h.present() && cur[f] && released(h.removed.Version) == nil:
			out = append(out, fmt.Sprintf("%s: %s is still in the API: remove the line from api/%s, or remove the feature",
				h.removed.pos(), f, ExceptFile))
		}
	}

	// Every exception accepts the removal of something recorded before it.
	for _, x := range rec.Except {
		recorded := false
		for _, r := range rec.Releases {
			if r.Version.Compare(x.Version) < 0 && slices.ContainsFunc(r.Entries, func(e Entry) bool { return e.Feature == x.Feature }) {
				recorded = true
			}
		}
		if !recorded {
			out = append(out, fmt.Sprintf("%s: no release before %s recorded %s: there is nothing to accept; remove the line",
				x.pos(), x.Version, x.Feature))
		}
	}

	// Every addition is in next.txt, and next.txt holds only additions.
	next := map[string]Entry{}
	for _, e := range rec.Next {
		next[e.Feature] = e
	}
	for _, f := range Next(current, rec) {
		if _, ok := next[f]; !ok {
			h := hs[f]
			if h != nil && h.removed != nil && cur[f] && released(h.removed.Version) == nil {
				continue // reported above: the exception is wrong, not next.txt
			}
			out = append(out, fmt.Sprintf("not recorded: %s\n\tit is new since the last release and not in api/%s: run make api to add it (and commit api/%s), or unexport it if it is not meant to be API",
				f, NextFile, NextFile))
		}
	}
	for _, e := range rec.Next {
		switch h := hs[e.Feature]; {
		case !cur[e.Feature]:
			out = append(out, fmt.Sprintf("%s: %s is not in the API (removed or changed since it was added): run make api", e.pos(), e.Feature))
		case h != nil && h.present():
			out = append(out, fmt.Sprintf("%s: %s is already recorded in %s: run make api", e.pos(), e.Feature, h.line.File))
		}
	}
	return out
}

// sectionLine is the line of except.txt's first "# v" heading.
func sectionLine(rec Record, v Version) int {
	for _, s := range rec.Sections {
		if s.Version == v {
			return s.Line
		}
	}
	return 0
}

// sameIdentity returns the features of current that are not recorded and
// declare what f declared (the same func, method, field, ...): what f was
// changed into.
func sameIdentity(f string, current []string, hs map[string]*history) []string {
	id := identity(f)
	var out []string
	for _, g := range current {
		if h := hs[g]; (h == nil || !h.present()) && identity(g) == id {
			out = append(out, g)
		}
	}
	return out
}

// identity is what a feature line declares, without its type or
// signature: "pkg P, func New", "pkg P, method Lock.Token",
// "pkg P, type T struct, Field".
func identity(f string) string {
	pkg, rest, _ := strings.Cut(f, ", ")
	scope := ""
	if decl, ok := strings.CutPrefix(rest, "type "); ok {
		n := name(decl)
		after := decl[len(n):]
		if strings.HasPrefix(after, "[") { // type parameters, which may hold ", "
			depth := 0
			for i, c := range after {
				if c == '[' {
					depth++
				} else if c == ']' {
					if depth--; depth == 0 {
						after = after[i+1:]
						break
					}
				}
			}
		}
		for _, kind := range []string{" struct, ", " interface, "} {
			if item, ok := strings.CutPrefix(after, kind); ok {
				scope, rest = "type "+n+kind, item
			}
		}
	}
	kind, decl, _ := strings.Cut(rest, " ")
	switch kind {
	case "func", "type", "const", "var":
		return pkg + ", " + scope + kind + " " + name(decl)
	case "method":
		recv, m, _ := strings.Cut(strings.TrimPrefix(decl, "("), ") ")
		return pkg + ", " + scope + "method " + name(strings.TrimPrefix(recv, "*")) + "." + name(m)
	case "embedded":
		return pkg + ", " + scope + rest
	}
	return pkg + ", " + scope + name(rest)
}

// name is the identifier s starts with.
func name(s string) string {
	if i := strings.IndexAny(s, "[( "); i >= 0 {
		return s[:i]
	}
	return s
}
