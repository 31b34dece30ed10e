package cli

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/router"
)

func newClustersCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "Work with cluster maps (--clusters)",
	}
	cmd.AddCommand(newClustersCheckMoveCmd(g))
	return cmd
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

// moveReport is check-move's output, for -o json.
type moveReport struct {
	OK       bool      `json:"ok"`
	Rows     []moveRow `json:"namespaces"`
	Problems []string  `json:"problems"`
}

func newClustersCheckMoveCmd(g *globals) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "check-move NEXT_MAP [--from CURRENT_MAP]",
		Short: "Check that a new cluster map keeps fencing tokens increasing",
		Long: `Compare the cluster map in force (--from, or else --clusters / BATON_CLUSTERS)
with NEXT_MAP, the map that is to replace it, as router.CheckMove does: every
namespace that moves to another cluster must find there a greater epoch, and a
cluster that keeps a namespace must not lower its epoch, so that the fencing
tokens lock and elect hand out (epoch<<47 | revision) keep increasing across
the move. Prints every namespace with the cluster and epoch before and after.
Connects to nothing. Exit 0 when the move is safe, 1 with every offence when
it is not, 64 when a map cannot be read.`,
		Example: `  baton --clusters clusters.yaml clusters check-move clusters-next.yaml`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if from == "" && g.cl != nil {
				from = g.cl.file
			}
			if from == "" {
				return usageErrorf("check-move needs the map in force: --from FILE, --clusters FILE or BATON_CLUSTERS")
			}
			prev, err := readMap("--from", from)
			if err != nil {
				return err
			}
			next, err := readMap("NEXT_MAP", a[0])
			if err != nil {
				return err
			}
			rep := moveReport{Rows: moveRows(prev, next), Problems: []string{}}
			cerr := router.CheckMove(prev, next)
			if cerr != nil {
				for _, e := range unjoin(cerr) {
					rep.Problems = append(rep.Problems, e.Error())
				}
			}
			rep.OK = cerr == nil
			out := cmd.OutOrStdout()
			if g.json() {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				t := newTable(out, "NAMESPACE", "FROM", "TO", "CHANGE")
				for _, r := range rep.Rows {
					ns := cell(r.Namespace)
					if r.Default {
						ns = "(default)"
					}
					t.row(ns, clusterEpoch(r.From, r.FromEpoch), clusterEpoch(r.To, r.ToEpoch), r.Change)
				}
				if err := t.flush(); err != nil {
					return err
				}
				if rep.OK {
					fmt.Fprintln(out, "safe: every fencing token issued after the switch is greater than every token issued before it")
				}
			}
			if cerr != nil {
				return fmt.Errorf("the move would let fencing tokens go backwards: %w", cerr)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the cluster map in force (default: --clusters or BATON_CLUSTERS)")
	return cmd
}

// readMap reads and validates a map file; it connects to nothing and
// does not need the files the map names.
func readMap(what, path string) (router.Map, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return router.Map{}, withCode(ExitUsage, fmt.Errorf("%s: %w", what, err))
	}
	m, err := router.ParseMap(data)
	if err != nil {
		return router.Map{}, withCode(ExitUsage, fmt.Errorf("%s %s: %w", what, path, err))
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
