package operate

import (
	"errors"
	"fmt"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
)

// runRequest is unlock --request: ask the holder of lock name to let go.
func runRequest(cmd *cobra.Command, g *cmdutil.Env, kind keys.Kind, name, reason string) error {
	ctx := cmd.Context()
	cli, octx, done, err := g.OpClient(ctx)
	if err != nil {
		return err
	}
	defer done()
	by := keyspace.HolderIdentity()
	if u, err := user.Current(); err == nil {
		by = u.Username + "@" + by
	}
	if cli.Username != "" {
		by = cli.Username + " (" + by + ")"
	}
	id, err := g.Identity(ctx, cli)
	if err != nil {
		return g.Failed("read the auth status", err)
	}
	m, err := request.Make(octx, cli, g.Namespace, kind, name, keys.Prefix(g.Namespace, kind, name), reason, by, request.Identity(id))
	what := fmt.Sprintf("request the release of %s %s", kind, cmdutil.SafeQ(name))
	switch {
	case errors.Is(err, request.ErrNoHolder):
		return fmt.Errorf("%s: nobody holds it", what)
	case err != nil && cmdutil.IsPermissionDenied(err):
		return g.PermissionDenied(what, "the requesters (or operators) access level of namespace "+cmdutil.SafeQ(g.Namespace)+
			" (a request is written with its audit record, on the holder's lease: every key on that lease must be writable too)", err)
	case err != nil:
		return g.Failed(what, err)
	}
	if g.JSON() {
		return cmdutil.WriteJSON(cmd.OutOrStdout(), struct {
			Action string `json:"action"`
			Kind   string `json:"kind"`
			Name   string `json:"name"`
			Holder string `json:"holder"`
			Key    string `json:"key"`
			Token  int64  `json:"token"`
			Reason string `json:"reason"`
			By     string `json:"by"`
			Audit  string `json:"audit_key"`
		}{keyspace.ActionRequestRelease, string(kind), name, m.Holder, m.Key, m.Token, reason, by, m.Audit})
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "asked the holder of %s %s (%s, token %d) to let go; audit record %s\n",
		kind, cmdutil.SafeQ(name), cmdutil.SafeQ(m.Holder), m.Token, cmdutil.Safe(m.Audit))
	return err
}

// validateRequest checks unlock --request's flags before connecting.
func validateRequest(cmd *cobra.Command, o forceOptions) error {
	switch {
	case o.force:
		return cmdutil.UsageErrorf("--request and --force exclude each other: a request asks, --force takes")
	case o.key != "" || o.evenIfAlive || o.revokeLease || o.to != "":
		return cmdutil.UsageErrorf("--request asks the holder of the lock: --holder-key, --even-if-alive and --revoke-lease go with --force")
	case strings.TrimSpace(o.reason) == "":
		return cmdutil.UsageErrorf("--reason: say why, for the holder and the audit record")
	}
	return cmdutil.ValidateReason(o.reason)
}
