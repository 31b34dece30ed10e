package hold

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/supervise"
)

// holdRun is what baton lock and baton elect set up, in this order, before
// they ask etcd for anything: the command checked (child nil: hold until
// interrupted), the metrics listener, tracing, the interrupt, the command
// span (ictx carries it) and the client, which outlives an interrupt (the
// release needs it).
type holdRun struct {
	child *supervise.Child
	ms    *metricsServer
	tp    trace.TracerProvider
	ictx  context.Context
	span  trace.Span
	cli   *clientv3.Client
	undo  []func(err error) // newest first
}

// startHoldRun sets up a run of cmd; the caller defers end with the
// command's error. On an error what was set up is undone.
func startHoldRun(cmd *cobra.Command, g *cmdutil.Env, argv []string, grace time.Duration, metricsAddr, spanName string, attrs ...attribute.KeyValue) (*holdRun, error) {
	r := &holdRun{}
	var err error
	if r.child, err = newChild(g, argv, grace, cmd); err != nil {
		return nil, err
	}
	if r.ms, err = startMetrics(metricsAddr, grace); err != nil {
		return nil, err
	}
	r.then(func(error) { r.ms.close() })
	errOut := cmd.ErrOrStderr()
	tr := cmdutil.StartTracing(cmd.Context(), g.IO.Getenv, errOut)
	r.tp = tr.Provider
	r.then(func(error) { tr.Flush(errOut) })
	ictx, stop := cmdutil.Interruptible(cmd.Context())
	r.then(func(error) { stop() })
	r.ictx, r.span = tr.StartCommand(ictx, spanName, attrs...)
	r.then(func(err error) { cmdutil.EndCommand(r.span, err) })
	if r.cli, err = g.Client(cmd.Context()); err != nil {
		r.end(err)
		return nil, err
	}
	r.then(func(error) { _ = r.cli.Close() })
	return r, nil
}

func (r *holdRun) then(f func(err error)) { r.undo = append([]func(error){f}, r.undo...) }

// end undoes the set-up, newest first; the command span ends with err.
func (r *holdRun) end(err error) {
	for _, f := range r.undo {
		f(err)
	}
	r.undo = nil
}
