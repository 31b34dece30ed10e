package apicheck

import (
	"fmt"
	"regexp"
	"strconv"
)

// Version is a release's version, vMAJOR.MINOR.PATCH.
type Version struct{ Major, Minor, Patch int }

var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// ParseVersion parses "vMAJOR.MINOR.PATCH" (no pre-release or build suffix).
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("%q is not a version vMAJOR.MINOR.PATCH", s)
	}
	var v Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	v.Patch, _ = strconv.Atoi(m[3])
	return v, nil
}

func (v Version) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Compare returns -1, 0 or +1 as v is before, equal to or after u.
func (v Version) Compare(u Version) int {
	for _, d := range [3]int{v.Major - u.Major, v.Minor - u.Minor, v.Patch - u.Patch} {
		if d < 0 {
			return -1
		}
		if d > 0 {
			return 1
		}
	}
	return 0
}

// MayBreak reports whether release to, following release from, may remove
// or change API: before v1 a minor release (v0.x to v0.x+1, or v1.0.0),
// from v1 a major one.
func MayBreak(from, to Version) bool {
	if to.Compare(from) <= 0 {
		return false
	}
	if from.Major == 0 {
		return to.Major > 0 || to.Minor > from.Minor
	}
	return to.Major > from.Major
}

// IsPatch reports whether to is a patch release after from: the same
// major and minor version, a later patch.
func IsPatch(from, to Version) bool {
	return to.Major == from.Major && to.Minor == from.Minor && to.Patch > from.Patch
}

// NextBreaking is the first release after from that may remove or change
// API.
func NextBreaking(from Version) Version {
	if from.Major == 0 {
		return Version{0, from.Minor + 1, 0}
	}
	return Version{from.Major + 1, 0, 0}
}

// breakRule says which releases may remove or change API after from.
func breakRule(from Version) string {
	if from.Major == 0 {
		return fmt.Sprintf("before v1 only a minor release (%s) may remove or change API", NextBreaking(from))
	}
	return fmt.Sprintf("from v1 only a major release (%s) may remove or change API", NextBreaking(from))
}
