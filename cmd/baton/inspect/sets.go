package inspect

import (
	"fmt"
	"io"
	"strings"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
)

// writeSets says, under the table, which held locks are one set's.
func writeSets(w io.Writer, rows []keyspace.LockRow) error {
	seen := make(map[string]bool)
	for _, r := range rows {
		if len(r.Set) == 0 || seen[r.Holder.Token.String()] {
			continue
		}
		seen[r.Holder.Token.String()] = true
		quoted := make([]string, len(r.Set))
		for i, n := range r.Set {
			quoted[i] = cmdutil.SafeQ(n)
		}
		if _, err := fmt.Fprintf(w, "token %s holds %d locks as one set: %s\n", r.Holder.Token, len(r.Set), strings.Join(quoted, ", ")); err != nil {
			return err
		}
	}
	return nil
}
