package cli

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/request"
)

// `baton unlock NAME --request --reason TEXT` asks the holder of a lock to
// let go (see package internal/request: a request on the holder's lease,
// audited in the same transaction, which only requesters and operators may
// write).
// `baton lock` passes a request to its command as --release-signal
// (SIGTERM by default), then SIGKILL after --grace, and releases the lock
// once the command has exited; without a command it releases at once.

const actionRequestRelease = "request-release"

// addReleaseSignalFlag is --release-signal of lock and elect.
func addReleaseSignalFlag(f *pflag.FlagSet, name *string) {
	f.StringVar(name, "release-signal", "TERM", "the signal that passes a release request (baton unlock --request) to the command; SIGKILL follows after --grace")
}

// parseSignal takes TERM, SIGTERM or a number from 1 to 64.
func parseSignal(name string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(name); err == nil {
		if n < 1 || n > 64 {
			return 0, usageErrorf("--release-signal %d: a signal number is 1 to 64", n)
		}
		return syscall.Signal(n), nil
	}
	s := unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(name), "SIG"))
	if s == 0 {
		return 0, usageErrorf("--release-signal %s: not a signal name (TERM, INT, HUP, USR1, ...)", safeQ(name))
	}
	return s, nil
}

// requestsOf is the release requests of a hold that can receive them.
func requestsOf(h any) <-chan request.Request {
	if rr, ok := h.(interface {
		ReleaseRequested() <-chan request.Request
	}); ok {
		return rr.ReleaseRequested()
	}
	return nil
}

// requested reports a release request passed on (reason and requester are
// untrusted text: escaped).
func (s *statusWriter) requested(r request.Request, passed string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emit(event{Event: eventRequested, Reason: r.Reason, By: r.By},
		fmt.Sprintf("release of %s requested by %s: %s; %s", s.what(), safe(r.By), safe(r.Reason), passed))
}

const eventRequested = "release-requested"

// runRequest is unlock --request: ask the holder of lock name to let go.
func runRequest(cmd *cobra.Command, g *globals, kind keys.Kind, name, reason string) error {
	ctx := cmd.Context()
	cli, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	octx, cancel := g.opContext(ctx)
	defer cancel()
	by := holderIdentity()
	if u, err := user.Current(); err == nil {
		by = u.Username + "@" + by
	}
	if cli.Username != "" {
		by = cli.Username + " (" + by + ")"
	}
	id, err := g.identity(ctx, cli)
	if err != nil {
		return g.failed("read the auth status", err)
	}
	m, err := request.Make(octx, cli, g.namespace, kind, name, keys.Prefix(g.namespace, kind, name), reason, by, request.Identity(id))
	what := fmt.Sprintf("request the release of %s %s", kind, safeQ(name))
	switch {
	case errors.Is(err, request.ErrNoHolder):
		return fmt.Errorf("%s: nobody holds it", what)
	case err != nil && isPermissionDenied(err):
		return g.permissionDenied(what, "the requesters (or operators) access level of namespace "+safeQ(g.namespace)+
			" (a request is written with its audit record, on the holder's lease: every key on that lease must be writable too)", err)
	case err != nil:
		return g.failed(what, err)
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), struct {
			Action string `json:"action"`
			Kind   string `json:"kind"`
			Name   string `json:"name"`
			Holder string `json:"holder"`
			Key    string `json:"key"`
			Token  int64  `json:"token"`
			Reason string `json:"reason"`
			By     string `json:"by"`
			Audit  string `json:"audit_key"`
		}{actionRequestRelease, string(kind), name, m.Holder, m.Key, m.Token, reason, by, m.Audit})
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "asked the holder of %s %s (%s, token %d) to let go; audit record %s\n",
		kind, safeQ(name), safeQ(m.Holder), m.Token, safe(m.Audit))
	return err
}

// validateRequest checks unlock --request's flags before connecting.
func validateRequest(cmd *cobra.Command, o forceOptions) error {
	switch {
	case o.force:
		return usageErrorf("--request and --force exclude each other: a request asks, --force takes")
	case o.key != "" || o.evenIfAlive || o.revokeLease || o.to != "":
		return usageErrorf("--request asks the holder of the lock: --holder-key, --even-if-alive and --revoke-lease go with --force")
	case strings.TrimSpace(o.reason) == "":
		return usageErrorf("--reason: say why, for the holder and the audit record")
	}
	return validateReason(o.reason)
}
