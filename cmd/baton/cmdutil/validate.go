package cmdutil

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

// Everything a command line says is checked here before any connection,
// so that a typo costs exit 64 at once, with the flag's name, and never a
// dial timeout.

// maxReasonBytes bounds --reason: one line of an audit record.
const maxReasonBytes = 1024

// nameArgs is the commands whose first argument is a lock or election name.
var nameArgs = map[string]string{
	"leader": "NAME", "candidates": "NAME", "observe": "NAME",
	"lock": "NAME", "elect": "NAME", "unlock": "NAME", "resign": "NAME",
	"shards": "GROUP", "shard": "GROUP",
}

// ValidateArgs checks the arguments and flags every command shares the
// meaning of: NAME, locks' PREFIX, --ttl.
func ValidateArgs(cmd *cobra.Command, a []string) error {
	if what, ok := nameArgs[cmd.Name()]; ok && cmd.Parent() != nil && !cmd.Parent().HasParent() && len(a) > 0 {
		if err := validateName(what, a[0]); err != nil {
			return err
		}
	}
	if cmd.Name() == "locks" && len(a) == 1 {
		if err := validatePrefix(a[0]); err != nil {
			return err
		}
	}
	if f := cmd.Flags().Lookup("ttl"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil {
			if err := validateTTL("--ttl", d); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateName refuses what the library refuses (empty, too long, not
// UTF-8, control characters) and, for the terminal's sake, format
// characters: a name with U+202E or U+200B cannot be told from another.
func validateName(what, name string) error {
	if err := keys.ValidateName(what, name); err != nil {
		return WithCode(ExitUsage, fmt.Errorf("%s %s: %w", what, SafeQ(name), err))
	}
	if i := strings.IndexFunc(name, UnsafeRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(name[i:])
		return UsageErrorf("%s %s: has the invisible or control character %U at byte %d; names must be printable", what, SafeQ(name), r, i)
	}
	return nil
}

func validatePrefix(p string) error {
	if len(p) > keys.MaxNameBytes {
		return UsageErrorf("PREFIX is %d bytes, at most %d allowed", len(p), keys.MaxNameBytes)
	}
	if !utf8.ValidString(p) || strings.ContainsFunc(p, UnsafeRune) {
		return UsageErrorf("PREFIX %s: has a control, invisible or invalid character", SafeQ(p))
	}
	return nil
}

// ValidateReason refuses a reason that could forge or hide a line of the
// audit trail.
func ValidateReason(reason string) error {
	switch {
	case len(reason) > maxReasonBytes:
		return UsageErrorf("--reason is %d bytes, at most %d allowed", len(reason), maxReasonBytes)
	case !utf8.ValidString(reason):
		return UsageErrorf("--reason %s: is not valid UTF-8", SafeQ(reason))
	}
	if i := strings.IndexFunc(reason, UnsafeRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(reason[i:])
		return UsageErrorf("--reason %s: has the control or invisible character %U at byte %d; give one line of printable text", SafeQ(reason), r, i)
	}
	return nil
}

// validateTTL applies the library's bounds, named by the flag.
func validateTTL(flag string, d time.Duration) error {
	switch {
	case d%time.Second != 0:
		return UsageErrorf("%s %v: must be whole seconds (etcd grants leases in seconds)", flag, d)
	case d < mutex.MinTTL:
		return UsageErrorf("%s %v: must be at least %v", flag, d, mutex.MinTTL)
	case d > mutex.DefaultMaxTTL:
		return UsageErrorf("%s %v: must be at most %v", flag, d, mutex.DefaultMaxTTL)
	}
	return nil
}

// validateEndpoint accepts what etcd's client dials: host:port,
// http://host:port, https://host:port, unix:// and unixs:// paths.
func validateEndpoint(ep string) error {
	bad := func(format string, args ...any) error {
		return UsageErrorf("--endpoints %s: "+format, append([]any{SafeQ(ep)}, args...)...)
	}
	if strings.ContainsFunc(ep, UnsafeRune) || strings.ContainsAny(ep, " \t") {
		return bad("has a space or control character")
	}
	hostport := ep
	if scheme, rest, ok := strings.Cut(ep, "://"); ok {
		switch scheme {
		case "http", "https":
			u, err := url.Parse(ep)
			if err != nil {
				return bad("%v", err)
			}
			if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
				return bad("an endpoint is scheme://host:port, with no path, query or user")
			}
			hostport = u.Host
		case "unix", "unixs":
			if rest == "" {
				return bad("no socket path")
			}
			return nil
		default:
			return bad("scheme %s is not http, https, unix or unixs", SafeQ(scheme))
		}
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return bad("want host:port (e.g. 127.0.0.1:2379): %v", err)
	}
	if host == "" {
		return bad("the host is empty")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return bad("port %s is not a number from 1 to 65535", SafeQ(port))
	}
	return nil
}

// Args checks the number of positional arguments, as a usage error.
func Args(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if len(a) < min || max >= 0 && len(a) > max {
			switch {
			case min == max:
				return UsageErrorf("%s takes %d argument(s), got %d", cmd.Name(), min, len(a))
			case max < 0:
				return UsageErrorf("%s takes at least %d argument(s), got %d", cmd.Name(), min, len(a))
			default:
				return UsageErrorf("%s takes %d to %d arguments, got %d", cmd.Name(), min, max, len(a))
			}
		}
		return nil
	}
}
