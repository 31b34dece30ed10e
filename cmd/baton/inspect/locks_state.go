package inspect

import (
	"fmt"
	"io"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/request"
)

// `baton locks` also shows the lock-delays running on the listed kinds
// (internal/delay's markers, each on a lease whose TTL is the time left on
// etcd's clock) and the release requests pending to the holders listed
// (internal/request's keys, one per holder's token).

type DelayJSON struct {
	Kind         string `json:"kind"`
	Name         string `json:"name"`
	Token        int64  `json:"lost_token"`
	DelaySeconds int64  `json:"delay_seconds"`
	LeftSeconds  int64  `json:"left_seconds"`
}

type releaseJSON struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

func releaseOf(r *request.Request) *releaseJSON {
	if r == nil {
		return nil
	}
	return &releaseJSON{By: r.By, Reason: r.Reason, At: r.At}
}

func delaysJSON(ds []keyspace.DelayRow) []DelayJSON {
	out := []DelayJSON{}
	for _, d := range ds {
		out = append(out, DelayJSON{Kind: d.Kind, Name: d.Name, Token: d.Token, DelaySeconds: int64(d.Delay / time.Second), LeftSeconds: cmdutil.TTLSeconds(d.Left)})
	}
	return out
}

// writeLockState writes a line per running lock-delay and per pending
// release request; every text from etcd is quoted and escaped.
func writeLockState(w io.Writer, rows []keyspace.LockRow, ds []keyspace.DelayRow) error {
	for _, d := range ds {
		if _, err := fmt.Fprintf(w, "lock-delay on %s %s: %s of %s left (the holder with token %d was lost)\n",
			d.Kind, cmdutil.SafeQ(d.Name), max(d.Left, 0), d.Delay, d.Token); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.Release == nil {
			continue
		}
		if _, err := fmt.Fprintf(w, "release requested of %s %s (token %s) by %s at %s: %s\n", keyspace.RowKind(r), cmdutil.SafeQ(r.Name),
			r.Holder.Token, cmdutil.SafeQ(r.Release.By), r.Release.At.UTC().Format(time.RFC3339), cmdutil.SafeQ(r.Release.Reason)); err != nil {
			return err
		}
	}
	return nil
}
