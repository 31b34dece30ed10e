package clusters

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/router"
)

func NewCmdClusters(g *cmdutil.Env) *cobra.Command {
	return cmdutil.Group("clusters", "Work with cluster maps (--clusters)", newClustersCheckMoveCmd(g), newClustersPinCmd(g), newClustersCheckCmd(g))
}

// moveRow is one namespace (or the default) of check-move's report.
type moveRow struct {
	Namespace string `json:"namespace,omitempty"`
	Default   bool   `json:"default,omitempty"`
	From      string `json:"from,omitempty"`
	FromEpoch uint16 `json:"from_epoch"`
	To        string `json:"to,omitempty"`
	ToEpoch   uint16 `json:"to_epoch"`
	Change    string `json:"change"` // moves, stays, added, removed
}

// MoveReport is check-move's output, for -o json.
type MoveReport struct {
	OK         bool           `json:"ok"`
	Rows       []moveRow      `json:"namespaces"`
	Identities []liveIdentity `json:"identities,omitempty"`
	Problems   []string       `json:"problems"`
}

func newClustersCheckMoveCmd(g *cmdutil.Env) *cobra.Command {
	var from string
	var offline bool
	cmd := &cobra.Command{
		Use:   "check-move NEXT_MAP [--from CURRENT_MAP]",
		Short: "Check that a new cluster map keeps fencing tokens increasing",
		Long: `Compare the cluster map in force (--from, or else --clusters / BATON_CLUSTERS)
with NEXT_MAP, the map that is to replace it, so that the fencing tokens lock
and elect hand out (epoch<<47 | revision) keep increasing across the switch:

  - a namespace (or the default) that goes to another etcd cluster must find
    there a greater epoch; clusters are told apart by their pinned identity
    (id) when both maps pin one, else by name, so a name repointed at another
    etcd cluster is a move;
  - on the same cluster the epoch must not go down, and a pin must not be
    dropped;
  - a namespace NEXT_MAP stops serving must be kept under retired: with its
    last cluster and epoch, and a retired one stays there until it is served
    again, at a greater epoch than its record;
  - then, unless --offline, every cluster of NEXT_MAP is connected to and
    must answer as the etcd cluster it pins, at no lower revision (as
    baton clusters check does).

Prints every namespace with the cluster and epoch before and after. Exit 0
when the move is safe, 1 with every offence when it is not (or a cluster is
not the one pinned), 69 when a cluster cannot be reached, 64 when a map cannot
be read.`,
		Example: `  baton --clusters clusters.yaml clusters check-move clusters-next.yaml`,
		Args:    cmdutil.Args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if from == "" && g.Clusters != nil {
				from = g.Clusters.File
			}
			if from == "" {
				return cmdutil.UsageErrorf("check-move needs the map in force: --from FILE, --clusters FILE or BATON_CLUSTERS")
			}
			prev, err := readMap("--from", from)
			if err != nil {
				return err
			}
			next, err := readMap("NEXT_MAP", a[0])
			if err != nil {
				return err
			}
			rep := MoveReport{Rows: moveRows(prev, next), Problems: []string{}}
			cerr := router.CheckMove(prev, next)
			if cerr != nil {
				for _, e := range unjoin(cerr) {
					rep.Problems = append(rep.Problems, e.Error())
				}
				cerr = fmt.Errorf("the move would let fencing tokens go backwards: %w", cerr)
			}
			if !offline {
				ids, err := identities(g, cmd.Context(), a[0], true)
				if err != nil {
					return err
				}
				rep.Identities = ids
				if ierr := identityError(ids); ierr != nil {
					for _, id := range ids {
						if id.Problem != "" {
							rep.Problems = append(rep.Problems, id.Problem)
						}
					}
					if cerr == nil {
						cerr = ierr
					} else {
						cerr = cmdutil.WithCode(cmdutil.ExitError, errors.Join(cerr, ierr))
					}
				}
			}
			rep.OK = cerr == nil
			out := cmd.OutOrStdout()
			if g.JSON() {
				if err := cmdutil.WriteJSON(out, rep); err != nil {
					return err
				}
			} else {
				t := cmdutil.NewTable(out, "NAMESPACE", "FROM", "TO", "CHANGE")
				for _, r := range rep.Rows {
					ns := cmdutil.Cell(r.Namespace)
					if r.Default {
						ns = "(default)"
					}
					t.Row(ns, clusterEpoch(r.From, r.FromEpoch), clusterEpoch(r.To, r.ToEpoch), r.Change)
				}
				if err := t.Flush(); err != nil {
					return err
				}
				if rep.Identities != nil {
					if err := writeIdentities(cmd, rep.Identities); err != nil {
						return err
					}
				}
				if rep.OK {
					fmt.Fprintln(out, "safe: every fencing token issued after the switch is greater than every token issued before it")
				}
			}
			return cerr
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the cluster map in force (default: --clusters or BATON_CLUSTERS)")
	cmd.Flags().BoolVar(&offline, "offline", false, "compare the maps only; do not check NEXT_MAP's pins against the live clusters")
	return cmd
}

// readMap reads and validates a map file; it connects to nothing and
// does not need the files the map names.
func readMap(what, path string) (router.Map, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return router.Map{}, cmdutil.WithCode(cmdutil.ExitUsage, fmt.Errorf("%s: %w", what, err))
	}
	m, err := router.ParseMap(data)
	if err != nil {
		return router.Map{}, cmdutil.WithCode(cmdutil.ExitUsage, fmt.Errorf("%s %s: %w", what, path, err))
	}
	return m, nil
}

// moveRows lists every namespace either map names, and the default, with
// its cluster before and after.
func moveRows(prev, next router.Map) []moveRow {
	pr, perr := router.New(prev)
	nr, nerr := router.New(next)
	if perr != nil || nerr != nil {
		return nil // both were validated by ParseMap
	}
	defer pr.Close()
	defer nr.Close()
	nss := slices.Concat(pr.Namespaces(), nr.Namespaces())
	slices.Sort(nss)
	nss = slices.Compact(nss)
	var rows []moveRow
	for _, ns := range nss {
		r := moveRow{Namespace: ns}
		a, errA := pr.Cluster(ns)
		b, errB := nr.Cluster(ns)
		if errA == nil {
			r.From, r.FromEpoch = a.Name, a.Epoch
		}
		if errB == nil {
			r.To, r.ToEpoch = b.Name, b.Epoch
		}
		r.Change = change(errA == nil, errB == nil, a.Name == b.Name)
		rows = append(rows, r)
	}
	if prev.Default != "" || next.Default != "" {
		r := moveRow{Default: true, From: prev.Default, To: next.Default}
		for _, c := range prev.Clusters {
			if c.Name == prev.Default {
				r.FromEpoch = c.Epoch
			}
		}
		for _, c := range next.Clusters {
			if c.Name == next.Default {
				r.ToEpoch = c.Epoch
			}
		}
		r.Change = change(prev.Default != "", next.Default != "", prev.Default == next.Default)
		rows = append(rows, r)
	}
	return rows
}

func change(before, after, same bool) string {
	switch {
	case !before:
		return "added"
	case !after:
		return "removed"
	case same:
		return "stays"
	default:
		return "moves"
	}
}

func clusterEpoch(name string, epoch uint16) string {
	if name == "" {
		return "-"
	}
	return name + " (epoch " + strconv.Itoa(int(epoch)) + ")"
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
