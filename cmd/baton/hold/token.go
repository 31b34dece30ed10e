package hold

import (
	"fmt"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/fencing"
)

// childToken is the fencing token lock and elect hand their command in
// BATON_FENCING_TOKEN: with a cluster map, composed with the epoch of the
// cluster that serves --namespace (router.Token), so that tokens keep
// increasing across a namespace's move to another cluster; otherwise the
// cluster's own token.
func childToken(g *cmdutil.Env, t fencing.Token) (fencing.Token, error) {
	if !g.Routed() {
		return t, nil
	}
	r, err := g.ClusterMap()
	if err != nil {
		return 0, err
	}
	ct, err := r.Token(g.Namespace, t)
	if err != nil {
		return 0, fmt.Errorf("fencing token for namespace %s: %w", g.Namespace, err)
	}
	return ct, nil
}
