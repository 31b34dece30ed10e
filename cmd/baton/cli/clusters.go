package cli

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
	file string
	fs   *pflag.FlagSet
	once sync.Once
	r    *router.Router
	err  error
}

func (g *globals) registerClusters(fs *pflag.FlagSet) {
	g.cl = &clusterState{fs: fs}
	fs.StringVar(&g.cl.file, "clusters", g.io.Getenv("BATON_CLUSTERS"),
		"cluster map: route each namespace to its etcd cluster, list across all of them (env BATON_CLUSTERS)")
}

// connectionFlags are the flags a cluster map replaces.
var connectionFlags = []string{"endpoints", "cacert", "cert", "key", "user"}

// routed reports whether a cluster map is in use. A map from
// BATON_CLUSTERS gives way to connection flags on the command line.
func (g *globals) routed() bool {
	if g.cl == nil || g.cl.file == "" {
		return false
	}
	if fl := g.cl.fs.Lookup("clusters"); fl != nil && fl.Changed {
		return true
	}
	for _, f := range connectionFlags {
		if fl := g.cl.fs.Lookup(f); fl != nil && fl.Changed {
			return false
		}
	}
	return true
}

// clusterMap reads the map once; a bad map or a flag that conflicts with
// it is a usage error.
func (g *globals) clusterMap() (*router.Router, error) {
	g.cl.once.Do(func() {
		for _, f := range connectionFlags {
			if fl := g.cl.fs.Lookup(f); fl != nil && fl.Changed {
				g.cl.err = usageErrorf("--%s and --clusters exclude each other: the cluster map gives each cluster's connection", f)
				return
			}
		}
		r, err := router.Load(g.cl.file, router.WithGetenv(g.io.Getenv))
		if err != nil {
			g.cl.err = withCode(ExitUsage, fmt.Errorf("--clusters: %w", err))
			return
		}
		g.cl.r = r
	})
	return g.cl.r, g.cl.err
}

// routedClient connects to the cluster that serves --namespace.
func (g *globals) routedClient(ctx context.Context) (*clientv3.Client, error) {
	r, err := g.clusterMap()
	if err != nil {
		return nil, err
	}
	c, err := r.Cluster(g.namespace)
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("--namespace %s: %w", g.namespace, err))
	}
	cg, err := g.forCluster(c)
	if err != nil {
		return nil, err
	}
	cli, err := cg.client(ctx)
	if err != nil {
		return nil, withCode(exitCode(err), fmt.Errorf("cluster %s: %w", c.Name, err))
	}
	return cli, nil
}

// forCluster is a copy of the global settings that reaches cluster c.
func (g *globals) forCluster(c router.Cluster) (*globals, error) {
	cg := &globals{
		io: g.io, namespace: g.namespace, output: g.output, ran: g.ran,
		dialTimeout: g.dialTimeout, commandTimeout: g.commandTimeout,
		endpoints: c.ClientEndpoints(), dialOptions: c.DialOptions(),
	}
	if c.TLS != nil {
		cg.cacert, cg.cert, cg.key = c.TLS.CA, c.TLS.Cert, c.TLS.Key
	}
	if cr := c.Credentials; cr != nil {
		var pw string
		if cr.PasswordEnv != "" {
			if pw = g.io.Getenv(cr.PasswordEnv); pw == "" {
				return nil, withCode(ExitUsage, fmt.Errorf("cluster %s: credentials: environment variable %s is empty", c.Name, cr.PasswordEnv))
			}
		} else {
			b, err := os.ReadFile(cr.PasswordFile)
			if err != nil {
				return nil, withCode(ExitUsage, fmt.Errorf("cluster %s: credentials: %w", c.Name, err))
			}
			pw = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		}
		cg.user = cr.User + ":" + pw
	}
	return cg, nil
}

// fanOut reports whether a listing command visits every cluster: a map is
// in use and --namespace was not given.
func (g *globals) fanOut(cmd *cobra.Command) bool {
	if !g.routed() {
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

// clusterResult is one cluster's share of a fanned-out command.
type clusterResult[T any] struct {
	Cluster    router.Cluster
	Namespaces []string
	Value      T
	Err        error
}

// eachCluster runs f for every cluster of the map in parallel, each with
// its own connection, and returns the results in the map's order. A
// cluster that cannot be reached gets its connection error.
func eachCluster[T any](ctx context.Context, g *globals, f func(ctx context.Context, cg *globals, cli *clientv3.Client, c router.Cluster, namespaces []string) (T, error)) ([]clusterResult[T], error) {
	r, err := g.clusterMap()
	if err != nil {
		return nil, err
	}
	cs := r.Clusters()
	out := make([]clusterResult[T], len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		out[i] = clusterResult[T]{Cluster: c, Namespaces: clusterNamespaces(r, c, g.namespace)}
		wg.Go(func() {
			res := &out[i]
			cg, err := g.forCluster(c)
			if err != nil {
				res.Err = err
				return
			}
			cli, err := cg.client(ctx)
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

// clusterStatus is how a fanned-out command reports each cluster, in JSON.
type clusterStatus struct {
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces"`
	OK         bool     `json:"ok"`
	Error      string   `json:"error,omitempty"`
}

func statuses[T any](res []clusterResult[T]) []clusterStatus {
	out := make([]clusterStatus, 0, len(res))
	for _, r := range res {
		s := clusterStatus{Name: r.Cluster.Name, Namespaces: r.Namespaces, OK: r.Err == nil}
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

// partial is the error of a fanned-out command: nil when every cluster
// answered, ExitPartial when some did not, and the first cluster's own
// code when none did. Each failure is also written in the table output
// by writeClusterFailures.
func partial[T any](res []clusterResult[T]) error {
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
		return withCode(exitCode(first), fmt.Errorf("no cluster answered: %w", errors.Join(errs(res)...)))
	default:
		return withCode(ExitPartial, fmt.Errorf("%d of %d clusters did not answer (%s); the others' results are shown",
			len(failed), len(res), strings.Join(failed, ", ")))
	}
}

func errs[T any](res []clusterResult[T]) []error {
	var out []error
	for _, r := range res {
		if r.Err != nil {
			out = append(out, fmt.Errorf("cluster %s: %w", r.Cluster.Name, r.Err))
		}
	}
	return out
}

// failureLines are the table output's report of clusters that did not
// answer.
func failureLines[T any](res []clusterResult[T]) []string {
	var out []string
	for _, r := range res {
		if r.Err != nil {
			state := "failed"
			if exitCode(r.Err) == ExitUnavailable {
				state = "not answering"
			}
			out = append(out, fmt.Sprintf("cluster %s (%s): %s: %s", r.Cluster.Name,
				strings.Join(r.Namespaces, ","), state, cell(r.Err.Error())))
		}
	}
	return out
}

// cell makes untrusted text safe for one table cell: quoted when it holds
// anything but printable characters and spaces.
func cell(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return strconv.Quote(s)
		}
	}
	return s
}
