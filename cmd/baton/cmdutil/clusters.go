package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/router"
)

// With a cluster map (--clusters FILE or BATON_CLUSTERS), a command that
// names a namespace connects to the cluster that serves it, with that
// cluster's endpoints, TLS files and credentials; the commands that list
// across namespaces (locks, audit without --namespace; rbac apply and
// show) visit every cluster in parallel and report the ones that do not
// answer, with ExitPartial, next to the others' results.

// clusterState is the --clusters flag and the map it names, read on first
// use.
type clusterState struct {
	File string
	fs   *pflag.FlagSet
	once sync.Once
	r    *router.Router
	err  error
}

func (g *Env) registerClusters(fs *pflag.FlagSet) {
	g.Clusters = &clusterState{fs: fs}
	fs.StringVar(&g.Clusters.File, "clusters", g.IO.Getenv("BATON_CLUSTERS"),
		"cluster map: route each namespace to its etcd cluster, list across all of them (env BATON_CLUSTERS)")
}

// ConnectionFlags are the flags a cluster map replaces.
var ConnectionFlags = []string{"endpoints", "cacert", "cert", "key", "user"}

// Routed reports whether a cluster map is in use. A map from
// BATON_CLUSTERS gives way to connection flags on the command line.
func (g *Env) Routed() bool {
	if g.Clusters == nil || g.Clusters.File == "" {
		return false
	}
	if fl := g.Clusters.fs.Lookup("clusters"); fl != nil && fl.Changed {
		return true
	}
	for _, f := range ConnectionFlags {
		if fl := g.Clusters.fs.Lookup(f); fl != nil && fl.Changed {
			return false
		}
	}
	return true
}

// ClusterMap reads the map once; a bad map or a flag that conflicts with
// it is a usage error.
func (g *Env) ClusterMap() (*router.Router, error) {
	g.Clusters.once.Do(func() {
		for _, f := range ConnectionFlags {
			if fl := g.Clusters.fs.Lookup(f); fl != nil && fl.Changed {
				g.Clusters.err = UsageErrorf("--%s and --clusters exclude each other: the cluster map gives each cluster's connection", f)
				return
			}
		}
		r, err := router.Load(g.Clusters.File, router.WithGetenv(g.IO.Getenv))
		if err != nil {
			g.Clusters.err = WithCode(ExitUsage, fmt.Errorf("--clusters: %w", err))
			return
		}
		g.Clusters.r = r
	})
	return g.Clusters.r, g.Clusters.err
}

// routedClient connects to the cluster that serves --namespace.
func (g *Env) routedClient(ctx context.Context) (*clientv3.Client, error) {
	r, err := g.ClusterMap()
	if err != nil {
		return nil, err
	}
	c, err := r.Cluster(g.Namespace)
	if err != nil {
		return nil, WithCode(ExitUsage, fmt.Errorf("--namespace %s: %w", g.Namespace, err))
	}
	cg, err := g.ForCluster(c)
	if err != nil {
		return nil, err
	}
	cli, err := cg.Client(ctx)
	if err != nil {
		return nil, WithCode(ExitCode(err), fmt.Errorf("cluster %s: %w", c.Name, err))
	}
	return cli, nil
}

// ForCluster is a copy of the global settings that reaches cluster c.
func (g *Env) ForCluster(c router.Cluster) (*Env, error) {
	cg := &Env{
		IO: g.IO, Namespace: g.Namespace, Output: g.Output, Ran: g.Ran,
		DialTimeout: g.DialTimeout, CommandTimeout: g.CommandTimeout,
		Endpoints: c.ClientEndpoints(), dialOptions: c.DialOptions(),
	}
	if c.TLS != nil {
		cg.cacert, cg.cert, cg.key = c.TLS.CA, c.TLS.Cert, c.TLS.Key
	}
	if cr := c.Credentials; cr != nil {
		var pw string
		if cr.PasswordEnv != "" {
			if pw = g.IO.Getenv(cr.PasswordEnv); pw == "" {
				return nil, WithCode(ExitUsage, fmt.Errorf("cluster %s: credentials: environment variable %s is empty", c.Name, cr.PasswordEnv))
			}
		} else {
			b, err := os.ReadFile(cr.PasswordFile)
			if err != nil {
				return nil, WithCode(ExitUsage, fmt.Errorf("cluster %s: credentials: %w", c.Name, err))
			}
			pw = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		}
		cg.User = cr.User + ":" + pw
	}
	return cg, nil
}

// FanOut reports whether a listing command visits every cluster: a map is
// in use and --namespace was not given.
func (g *Env) FanOut(cmd *cobra.Command) bool {
	if !g.Routed() {
		return false
	}
	fl := cmd.Flags().Lookup("namespace")
	return fl == nil || !fl.Changed
}

// clusterNamespaces are the namespaces a listing visits on cluster c: the
// ones it lists, and for the default cluster --namespace's default when no
// cluster lists it.
func clusterNamespaces(r *router.Router, c router.Cluster, dflt string) []string {
	out := slices.Clone(c.Namespaces)
	if r.Default() == c.Name && !slices.Contains(r.Namespaces(), dflt) {
		out = append(out, dflt)
	}
	slices.Sort(out)
	return out
}

// ClusterResult is one cluster's share of a fanned-out command.
type ClusterResult[T any] struct {
	Cluster    router.Cluster
	Namespaces []string
	Value      T
	Err        error
}

// EachCluster runs f for every cluster of the map in parallel, each with
// its own connection, and returns the results in the map's order. A
// cluster that cannot be reached gets its connection error.
func EachCluster[T any](ctx context.Context, g *Env, f func(ctx context.Context, cg *Env, cli *clientv3.Client, c router.Cluster, namespaces []string) (T, error)) ([]ClusterResult[T], error) {
	r, err := g.ClusterMap()
	if err != nil {
		return nil, err
	}
	cs := r.Clusters()
	out := make([]ClusterResult[T], len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		out[i] = ClusterResult[T]{Cluster: c, Namespaces: clusterNamespaces(r, c, g.Namespace)}
		wg.Go(func() {
			res := &out[i]
			cg, err := g.ForCluster(c)
			if err != nil {
				res.Err = err
				return
			}
			cli, err := cg.Client(ctx)
			if err != nil {
				res.Err = err
				return
			}
			defer cli.Close()
			res.Value, res.Err = f(ctx, cg, cli, c, res.Namespaces)
		})
	}
	wg.Wait()
	return out, nil
}

// ClusterStatus is how a fanned-out command reports each cluster, in JSON.
type ClusterStatus struct {
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces"`
	OK         bool     `json:"ok"`
	Error      string   `json:"error,omitempty"`
}

func Statuses[T any](res []ClusterResult[T]) []ClusterStatus {
	out := make([]ClusterStatus, 0, len(res))
	for _, r := range res {
		s := ClusterStatus{Name: r.Cluster.Name, Namespaces: r.Namespaces, OK: r.Err == nil}
		if s.Namespaces == nil {
			s.Namespaces = []string{}
		}
		if r.Err != nil {
			s.Error = r.Err.Error()
		}
		out = append(out, s)
	}
	return out
}

// Partial is the error of a fanned-out command: nil when every cluster
// answered, ExitPartial when some did not, and the first cluster's own
// code when none did. Each failure is also written in the table output
// by writeClusterFailures.
func Partial[T any](res []ClusterResult[T]) error {
	var failed []string
	var first error
	for _, r := range res {
		if r.Err != nil {
			failed = append(failed, r.Cluster.Name)
			if first == nil {
				first = r.Err
			}
		}
	}
	switch {
	case len(failed) == 0:
		return nil
	case len(failed) == len(res):
		return WithCode(ExitCode(first), fmt.Errorf("no cluster answered: %w", errors.Join(errs(res)...)))
	default:
		return WithCode(ExitPartial, fmt.Errorf("%d of %d clusters did not answer (%s); the others' results are shown",
			len(failed), len(res), strings.Join(failed, ", ")))
	}
}

func errs[T any](res []ClusterResult[T]) []error {
	var out []error
	for _, r := range res {
		if r.Err != nil {
			out = append(out, fmt.Errorf("cluster %s: %w", r.Cluster.Name, r.Err))
		}
	}
	return out
}

// FailureLines are the table output's report of clusters that did not
// answer.
func FailureLines[T any](res []ClusterResult[T]) []string {
	var out []string
	for _, r := range res {
		if r.Err != nil {
			state := "failed"
			if ExitCode(r.Err) == ExitUnavailable {
				state = "not answering"
			}
			out = append(out, fmt.Sprintf("cluster %s (%s): %s: %s", r.Cluster.Name,
				strings.Join(r.Namespaces, ","), state, Cell(r.Err.Error())))
		}
	}
	return out
}

// Cell makes untrusted text safe for one table cell: quoted when it holds
// anything but printable characters and spaces.
func Cell(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return strconv.Quote(s)
		}
	}
	return s
}
