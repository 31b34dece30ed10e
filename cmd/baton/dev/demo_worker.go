package dev

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/hold"
	"github.com/batonhq/baton/election"
)

// workerEvent is one line a demo worker prints on its stdout.
type workerEvent struct {
	Ev     string `json:"ev"` // campaign, leader, gap, write, lost, resigned, error
	Token  int64  `json:"token,omitempty"`
	Seq    int    `json:"seq,omitempty"`
	Status string `json:"status,omitempty"` // of a write: accepted, rejected, failed
	Detail string `json:"detail,omitempty"`
}

// Worker events.
const (
	evCampaign = "campaign"
	evLeader   = "leader"
	evGap      = "gap"
	evWrite    = "write"
	evLost     = "lost"
	evResigned = "resigned"
	evError    = "error"
)

type workerOptions struct {
	id       string
	election string
	ledger   string
	ttl      time.Duration
	interval time.Duration
}

func NewCmdDemoWorker(g *cmdutil.Env) *cobra.Command {
	var o workerOptions
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Short:  "One worker of baton demo",
		Hidden: true,
		Args:   cmdutil.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemoWorker(cmd, g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.id, "id", "", "worker name, the value it campaigns with")
	f.StringVar(&o.election, "election", "demo", "election name")
	f.StringVar(&o.ledger, "ledger", "", "ledger URL")
	f.DurationVar(&o.ttl, "ttl", 2*time.Second, "lease TTL")
	f.DurationVar(&o.interval, "interval", 150*time.Millisecond, "pause before each write")
	return cmd
}

// runDemoWorker campaigns and, while leader, writes numbered records to
// the ledger with its token. Its loop is the one every fencing story is
// about: it checks that it still leads, then pauses (a GC pause, a slow
// disk, a SIGSTOP) and then writes without checking again. The ledger's
// guard is what stops a write made after leadership passed on.
func runDemoWorker(cmd *cobra.Command, g *cmdutil.Env, o workerOptions) error {
	if o.id == "" || o.ledger == "" {
		return cmdutil.UsageErrorf("--id and --ledger are required")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The demo holds our stdin open: when it goes away, so do we.
	go func() {
		_, _ = io.Copy(io.Discard, cmd.InOrStdin())
		cancel()
	}()

	var mu sync.Mutex
	enc := json.NewEncoder(cmd.OutOrStdout())
	emit := func(ev workerEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}

	cli, err := g.Client(ctx)
	if err != nil {
		emit(workerEvent{Ev: evError, Detail: err.Error()})
		return err
	}
	defer cli.Close()
	e, err := election.New(cli, o.election, election.WithTTL(o.ttl), election.WithNamespace(g.Namespace))
	if err != nil {
		return cmdutil.WithCode(cmdutil.ExitUsage, err)
	}
	defer e.Close()
	hc := &http.Client{Timeout: 2 * time.Second}

	for ctx.Err() == nil {
		emit(workerEvent{Ev: evCampaign})
		t, err := e.Campaign(ctx, o.id)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			emit(workerEvent{Ev: evError, Detail: err.Error()})
			if !cmdutil.Sleep(ctx, 200*time.Millisecond) {
				break
			}
			continue
		}
		token := int64(t.Token())
		emit(workerEvent{Ev: evLeader, Token: token})
		for seq := 1; ; seq++ {
			// Still leader, as far as this process knows. Now the pause:
			// nothing between here and the write looks at t.Context().
			emit(workerEvent{Ev: evGap, Token: token, Seq: seq})
			if !cmdutil.Sleep(ctx, o.interval) {
				break
			}
			status, detail := ledgerWrite(hc, o.ledger, o.id, token, seq)
			emit(workerEvent{Ev: evWrite, Token: token, Seq: seq, Status: status, Detail: detail})
			if t.Context().Err() != nil || status == "rejected" {
				break
			}
		}
		cause := context.Cause(t.Context())
		hold.ResignQuietly(t)
		if ctx.Err() != nil {
			emit(workerEvent{Ev: evResigned, Token: token})
			break
		}
		detail := "the ledger rejected its token"
		if cause != nil {
			detail = cause.Error()
		}
		emit(workerEvent{Ev: evLost, Token: token, Detail: detail})
	}
	return nil
}

// ledgerWrite posts one record; the request does not use the term's
// context, as a write already under way in a paused process would not.
func ledgerWrite(hc *http.Client, base, worker string, token int64, seq int) (status, detail string) {
	q := url.Values{"worker": {worker}, "token": {strconv.FormatInt(token, 10)}, "seq": {strconv.Itoa(seq)}}
	resp, err := hc.Post(base+"/write?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return "failed", err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch resp.StatusCode {
	case http.StatusOK:
		return "accepted", string(body)
	case http.StatusConflict:
		return "rejected", string(body)
	}
	return "failed", fmt.Sprintf("%s: %s", resp.Status, body)
}
