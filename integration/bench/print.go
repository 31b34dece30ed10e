package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/batonhq/baton/integration/harness"
)

// Print writes the report as a table: for each measure, baton's and raw's
// median with the lowest and highest run, their ratio, and the target.
func (rep *Report) Print(w io.Writer) error {
	compared := "baton vs raw etcd concurrency"
	if rep.Starved() {
		compared = "STARVED: " + compared
	}
	if rep.Compared != "" {
		compared = rep.Compared
	}
	fmt.Fprintf(w, "%s: %d runs each, %s, %d CPUs, load %s → %s\n",
		compared, rep.Config.Runs, rep.GoVersion, rep.CPUs, rep.LoadBefore, rep.LoadAfter)
	fmt.Fprintf(w, "fdatasync 4 KiB floor: p50 %s ms, p99 %s ms\n", spread(rep.FdatasyncP50), spread(rep.FdatasyncP99))
	fmt.Fprintf(w, "this process's scheduling (a %v sleep, again and again): %s\n", harness.MeterPeriod, rep.Starvation)
	if rep.Starved() {
		fmt.Fprintf(w, "STARVED: %d of %d runs lost 1 %% of their time or %v at once to stalls; their timings (marked *) are not results, and their targets not judged\n",
			rep.StarvedRuns, rep.Runs, benchStarvedIf.Max)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tmeasure\tbaton median [min–max]\traw median [min–max]\tbaton/raw\ttarget")
	for _, m := range rep.Measures {
		ratio := "–"
		if m.Raw.Median != 0 {
			ratio = fmt.Sprintf("%.3g", m.Ratio)
		}
		target := ""
		if m.Met != nil {
			verdict := "MISSED"
			if *m.Met {
				verdict = "met"
			}
			target = verdict + ": " + m.Target
		} else if m.Target != "" {
			target = m.Target // not judged
		}
		metric := m.Metric
		if m.Starved > 0 && timing(m.Metric) {
			metric += " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Workload, metric, spread(m.Baton), spread(m.Raw), ratio, target)
	}
	return tw.Flush()
}

func spread(s harness.Summary) string {
	if len(s.Runs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s [%s–%s]", num(s.Median), num(s.Min), num(s.Max))
}

// num prints 3 significant digits without an exponent for usual sizes.
func num(v float64) string {
	switch a := abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
