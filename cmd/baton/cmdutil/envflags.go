package cmdutil

import (
	"strings"

	"github.com/spf13/pflag"
)

// EnvName is the variable that sets a global flag: --dial-timeout is
// BATON_DIAL_TIMEOUT.
func EnvName(flag string) string {
	return "BATON_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// flagsFromEnv gives every flag of fs the value of its BATON_* variable,
// if set, as its default: a flag on the command line still wins. The first
// value that does not parse is returned as a usage error naming the
// variable.
func flagsFromEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var first error
	fs.VisitAll(func(f *pflag.Flag) {
		env := EnvName(f.Name)
		f.Usage += " (env " + env + ")"
		v := getenv(env)
		if v == "" {
			return
		}
		var err error
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			// Replace, not Set: a later --flag must replace it, not append.
			err = sv.Replace(splitList(v))
		} else {
			err = f.Value.Set(v)
		}
		if err != nil {
			if first == nil {
				first = UsageErrorf("%s=%s: %v", env, SafeQ(v), err)
			}
			return
		}
		f.DefValue = f.Value.String()
	})
	return first
}
