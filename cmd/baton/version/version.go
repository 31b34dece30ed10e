package version

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/version"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
)

// Supported etcd server versions, as docs/compatibility.md has them.
const (
	minSupportedMinor = 4 // etcd 3.4
	maxTestedMinor    = 7 // etcd 3.7
)

// Template is what --version prints; `baton version` also asks
// the servers.
var Template = "baton version {{.Version}}\netcd client " + version.Version + " (API " + version.APIVersion +
	")\n`baton version --servers` (or with --endpoints) also shows the etcd server versions\n"

// serverSupport says what baton makes of an etcd server version: whether
// it is supported, and a short verdict.
func serverSupport(v string) (supported bool, verdict string) {
	major, minor, ok := majorMinor(v)
	switch {
	case !ok:
		return false, "unknown version: baton is tested with etcd 3.4 to 3.7"
	case major != 3 || minor < minSupportedMinor:
		return false, "unsupported: baton is tested with etcd 3.4 to 3.7 (docs/compatibility.md)"
	case minor == 4:
		return true, "supported (3.4: leave --tls-min-version out; auth status by probe)"
	case minor > maxTestedMinor:
		return true, "newer than tested (3.4 to 3.7): expected to work"
	default:
		return true, "supported"
	}
}

func majorMinor(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// endpointVersion is one endpoint's answer to baton version.
type endpointVersion struct {
	Cluster   string `json:"cluster,omitempty"`
	Endpoint  string `json:"endpoint"`
	Version   string `json:"version,omitempty"`
	Supported bool   `json:"supported"`
	Verdict   string `json:"verdict,omitempty"`
	Error     string `json:"error,omitempty"`
	err       error
}

// versionReport is baton version's output, for -o json.
type versionReport struct {
	Baton   string            `json:"baton"`
	Client  string            `json:"etcd_client"`
	API     string            `json:"etcd_api"`
	Servers []endpointVersion `json:"servers"`
}

func NewCmdVersion(g *cmdutil.Env) *cobra.Command {
	var servers bool
	cmd := &cobra.Command{
		Use:   "version [--servers]",
		Short: "Print baton's version, its etcd client's, and the etcd servers'",
		Long: `Print baton's version and commit and the version of its etcd client and API,
as etcdctl version does. With connection flags (--endpoints, --cacert, --cert,
--key, --user, or their BATON_* variables), --clusters, or --servers, also ask
every endpoint its etcd server version (as etcdctl endpoint status does), and
say whether baton supports it (docs/compatibility.md: etcd 3.4 to 3.7).

Exit 0 when every endpoint answered with a supported version; 1 when one runs
an unsupported version; 3 when some endpoints did not answer (the others are
shown); 69 (or 78 when refused) when none did.`,
		Example: `  baton version --endpoints https://etcd-1:2379,https://etcd-2:2379 --cacert ca.crt
  baton version --clusters clusters.yaml -o json`,
		Args: cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := versionReport{Baton: Text(), Client: version.Version, API: version.APIVersion, Servers: []endpointVersion{}}
			ask := servers || g.Routed() || connectionGiven(g, cmd)
			if ask {
				eps, err := endpointVersions(g, cmd.Context())
				if err != nil {
					return err
				}
				rep.Servers = eps
			}
			out := cmd.OutOrStdout()
			if g.JSON() {
				if err := cmdutil.WriteJSON(out, rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "baton        %s\n", rep.Baton)
				fmt.Fprintf(out, "etcd client  %s (API %s)\n", rep.Client, rep.API)
				if ask {
					routed := g.Routed()
					head := []string{"ENDPOINT", "SERVER", "SUPPORT"}
					if routed {
						head = append([]string{"CLUSTER"}, head...)
					}
					t := cmdutil.NewTable(out, head...)
					for _, e := range rep.Servers {
						row := []string{e.Endpoint, cmdutil.Dash(e.Version), e.Verdict}
						if e.err != nil {
							state := "failed"
							switch cmdutil.ExitCode(e.err) {
							case cmdutil.ExitUnavailable:
								state = "not answering"
							case cmdutil.ExitDenied:
								state = "refused"
							}
							row[2] = state + ": " + cmdutil.Cell(e.Error)
						}
						if routed {
							row = append([]string{e.Cluster}, row...)
						}
						t.Row(row...)
					}
					if err := t.Flush(); err != nil {
						return err
					}
				}
			}
			return versionsError(rep.Servers)
		},
	}
	cmd.Flags().BoolVar(&servers, "servers", false, "ask the etcd servers their version even without connection flags")
	return cmd
}

// connectionGiven reports whether a connection flag was set on the command
// line or by its BATON_* variable.
func connectionGiven(g *cmdutil.Env, cmd *cobra.Command) bool {
	for _, f := range cmdutil.ConnectionFlags {
		if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed || g.IO.Getenv(cmdutil.EnvName(f)) != "" {
			return true
		}
	}
	return false
}

// endpointVersions asks every endpoint (of every cluster, with a map)
// its server version, in parallel, each bounded by --dial-timeout and
// --command-timeout.
func endpointVersions(g *cmdutil.Env, ctx context.Context) ([]endpointVersion, error) {
	type target struct {
		cluster string
		g       *cmdutil.Env
	}
	var targets []target
	if g.Routed() {
		r, err := g.ClusterMap()
		if err != nil {
			return nil, err
		}
		for _, c := range r.Clusters() {
			cg, err := g.ForCluster(c)
			if err != nil {
				return nil, err
			}
			targets = append(targets, target{c.Name, cg})
		}
	} else {
		user, password, err := g.Credentials() // once: it may read stdin or prompt
		if err != nil {
			return nil, err
		}
		cg := *g
		cg.Clusters, cg.PasswordStdin, cg.PasswordFile, cg.User = nil, false, "", ""
		if user != "" {
			cg.User = user + ":" + password
		}
		targets = append(targets, target{"", &cg})
	}
	var out []endpointVersion
	for _, t := range targets {
		for _, ep := range t.g.Endpoints {
			out = append(out, endpointVersion{Cluster: t.cluster, Endpoint: ep})
		}
	}
	var wg sync.WaitGroup
	i := 0
	for _, t := range targets {
		for _, ep := range t.g.Endpoints {
			res := &out[i]
			i++
			eg := *t.g
			eg.Endpoints = []string{ep}
			wg.Go(func() { res.ask(ctx, &eg) })
		}
	}
	wg.Wait()
	return out, nil
}

func (e *endpointVersion) ask(ctx context.Context, g *cmdutil.Env) {
	cli, err := g.Client(ctx)
	if err == nil {
		defer cli.Close()
		octx, cancel := g.OpContext(ctx)
		defer cancel()
		st, serr := cli.Status(octx, e.Endpoint)
		if serr == nil {
			e.Version = st.Version
			e.Supported, e.Verdict = serverSupport(st.Version)
			return
		}
		err = g.Failed("status of "+e.Endpoint, serr)
	}
	e.err, e.Error = err, err.Error()
}

// versionsError is nil when every endpoint answered with a supported
// version.
func versionsError(eps []endpointVersion) error {
	var failed, unsupported []string
	var first error
	for _, e := range eps {
		switch {
		case e.err != nil:
			failed = append(failed, e.Endpoint)
			if first == nil {
				first = e.err
			}
		case !e.Supported:
			unsupported = append(unsupported, fmt.Sprintf("%s runs etcd %s", e.Endpoint, cmdutil.Safe(e.Version)))
		}
	}
	switch {
	case len(eps) > 0 && len(failed) == len(eps):
		return cmdutil.WithCode(cmdutil.ExitCode(first), fmt.Errorf("no endpoint answered: %w", first))
	case len(failed) > 0:
		return cmdutil.WithCode(cmdutil.ExitPartial, fmt.Errorf("%d of %d endpoints did not answer (%s); the others are shown",
			len(failed), len(eps), strings.Join(failed, ", ")))
	case len(unsupported) > 0:
		return fmt.Errorf("%s: baton supports etcd 3.4 to 3.7 (docs/compatibility.md)", strings.Join(unsupported, "; "))
	}
	return nil
}

// libraryPath is the library's module, whose internal packages the CLI
// links.
const libraryPath = "github.com/batonhq/baton"

// Skew refuses a build whose library is not the CLI's own release: the
// CLI links the library's internal packages, which promise nothing
// between versions, so a CLI of one release built with another release's
// library (go get -tool into a module that requires a newer library, say)
// may misread what the library writes. A build from a checkout, or of
// unreleased versions, is not judged.
func Skew() error {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return skew(info)
}

func skew(info *debug.BuildInfo) error {
	cli := info.Main.Version
	for _, d := range info.Deps {
		if d.Path != libraryPath {
			continue
		}
		lib := d.Version
		if d.Replace != nil {
			return nil // a development build
		}
		if !released(cli) || !released(lib) || cli == lib {
			return nil
		}
		return fmt.Errorf("this baton is the CLI of %s built with the library of %s: the two must be one release; install it with `go install %s/cmd/baton@%s` (its own module, not a tool of another module)", cli, lib, libraryPath, cli)
	}
	return nil
}

// released reports whether v names a tagged release, not a pseudo-version
// or a development build.
func released(v string) bool {
	return semver.IsValid(v) && !module.IsPseudoVersion(v) && semver.Build(v) == ""
}

// release is the version make dist stamps (-ldflags -X): a build from a
// checkout has "(devel)" or a pseudo-version derived from the commit as
// its module version, which the release's name replaces; `go install
// …@VERSION` needs no stamp.
var release string

// Text is the module version and the commit baton was built from.
func Text() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (built without module information)"
	}
	v := info.Main.Version
	if release != "" {
		v = release
	}
	if v == "" {
		v = "(devel)"
	}
	var rev, when, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev == "" {
		return fmt.Sprintf("%s (commit unknown), %s", v, info.GoVersion)
	}
	return fmt.Sprintf("%s (commit %s%s, %s), %s", v, rev, dirty, when, info.GoVersion)
}
