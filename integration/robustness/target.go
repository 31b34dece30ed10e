package robustness

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

// Target is the etcd cluster a run drives: embedded members
// (internal/embedetcd/cluster) or real server processes (integration/compat).
type Target interface {
	// Endpoints are the members' client URLs, in a fixed order.
	Endpoints() []string
	// Kill stops member i as a crash would; Restart starts the given
	// members again on their data, together (one alone cannot serve
	// without a quorum), and waits until they serve.
	Kill(i int) error
	Restart(ctx context.Context, members ...int) error
	Running(i int) bool
}

// PeerCutter is a Target that can cut a member from its peers while its
// clients still reach it (member-isolate).
type PeerCutter interface {
	CutPeers(i int)
	MendPeers(i int)
}

// Embedded is a Target of embedded members.
type Embedded struct{ C *cluster.Cluster }

// Endpoints implements Target.
func (e Embedded) Endpoints() []string { return e.C.Endpoints() }

// Kill implements Target.
func (e Embedded) Kill(i int) error { e.C.Member(i).Kill(); return nil }

// CutPeers implements PeerCutter.
func (e Embedded) CutPeers(i int) { e.C.Member(i).CutPeers() }

// MendPeers implements PeerCutter.
func (e Embedded) MendPeers(i int) { e.C.Member(i).MendPeers() }

// Running implements Target.
func (e Embedded) Running(i int) bool { return e.C.Member(i).Running() }

// Restart implements Target.
func (e Embedded) Restart(_ context.Context, members ...int) error {
	var ms []*cluster.Member
	for _, i := range members {
		if !e.C.Member(i).Running() {
			ms = append(ms, e.C.Member(i))
		}
	}
	return e.C.Restart(ms...)
}

func newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// heal lets a client's cut or slowed traffic flow again.
func heal(p *cluster.Partition) {
	p.SetDelay(0)
	p.Restore()
}

// memberStatus finds the leader's index and every member's Raft ID, asking
// each running member.
func memberStatus(ctx context.Context, t Target) (leader int, ids []uint64, err error) {
	eps := t.Endpoints()
	ids = make([]uint64, len(eps))
	leader = -1
	var leaderID uint64
	for i, ep := range eps {
		if !t.Running(i) {
			continue
		}
		cli, cerr := newClient([]string{ep})
		if cerr != nil {
			err = cerr
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, serr := cli.Status(sctx, ep)
		cancel()
		_ = cli.Close()
		if serr != nil {
			err = serr
			continue
		}
		ids[i] = st.Header.MemberId
		if st.Leader != 0 {
			leaderID = st.Leader
		}
	}
	for i, id := range ids {
		if id != 0 && id == leaderID {
			return i, ids, nil
		}
	}
	if err == nil {
		err = errors.New("no leader among the running members")
	}
	return -1, ids, fmt.Errorf("member status: %w", err)
}
