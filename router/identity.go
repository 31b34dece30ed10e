package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Identity is who an etcd cluster says it is: the cluster ID every
// response header carries, and the revision it had reached when it was
// read. etcd derives the cluster ID from the initial members' peer URLs
// and --initial-cluster-token, so a cluster rebuilt with the same ones has
// the same ID; its revision starts again at 1, which is what Revision
// catches.
type Identity struct {
	ClusterID uint64
	Revision  int64
}

// String is the cluster ID as the map pins it: 16 hex digits.
func (id Identity) String() string { return FormatClusterID(id.ClusterID) }

// FormatClusterID writes a cluster ID as a map pins it: 16 hex digits.
func FormatClusterID(id uint64) string { return fmt.Sprintf("%016x", id) }

// ParseClusterID reads a cluster ID as a map pins it: 1 to 16 hex digits,
// not zero.
func ParseClusterID(s string) (uint64, error) {
	if len(s) == 0 || len(s) > 16 {
		return 0, fmt.Errorf("cluster id %q must be 1 to 16 hex digits", s)
	}
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("cluster id %q must be 1 to 16 hex digits, not zero", s)
	}
	return id, nil
}

// Identify asks the cluster behind cli who it is: the cluster ID of a
// linearizable member listing (so the answer comes through the cluster's
// leader), and the greatest revision its endpoints report. Every endpoint
// must answer as the same cluster. It needs no permission on any key.
func Identify(ctx context.Context, cli *clientv3.Client) (Identity, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return Identity{}, err
	}
	id := Identity{ClusterID: ml.Header.ClusterId}
	var lastErr error
	answered := 0
	for _, ep := range cli.Endpoints() {
		st, err := cli.Status(ctx, ep)
		if errors.Is(err, ErrIdentity) {
			return Identity{}, fmt.Errorf("endpoint %s: %w", ep, err)
		}
		if err != nil {
			lastErr = err
			continue
		}
		if st.Header.ClusterId != id.ClusterID {
			return Identity{}, fmt.Errorf("%w: endpoint %s answers as etcd cluster %s, the others as %s: the endpoints are of two clusters",
				ErrIdentity, ep, FormatClusterID(st.Header.ClusterId), FormatClusterID(id.ClusterID))
		}
		id.Revision = max(id.Revision, st.Header.Revision)
		answered++
	}
	if answered == 0 {
		return Identity{}, lastErr
	}
	return id, nil
}

// identityCheck fails every etcd response from a cluster other than the
// one a map's cluster pins (or, without a pin, other than the first one
// the connection met), and every response whose revision is below the
// pinned one: the name then leads to another cluster, whose tokens would
// not order after the ones issued before.
type identityCheck struct {
	c     Cluster
	floor int64
	mu    sync.Mutex
	want  uint64 // 0 until learnt when the map pins none
}

func newIdentityCheck(c Cluster) *identityCheck {
	k := &identityCheck{c: c, floor: c.Revision}
	if c.ID != "" {
		k.want, _ = ParseClusterID(c.ID) // validated with the map
	}
	return k
}

func (k *identityCheck) check(h *pb.ResponseHeader) error {
	if h == nil || h.ClusterId == 0 {
		return nil
	}
	k.mu.Lock()
	if k.want == 0 {
		k.want = h.ClusterId
	}
	want := k.want
	k.mu.Unlock()
	if h.ClusterId != want {
		if k.c.ID == "" {
			return fmt.Errorf("%w: cluster %q: its endpoints answered as etcd cluster %s, then as %s; pin the right one in the map (baton clusters pin)",
				ErrIdentity, k.c.Name, FormatClusterID(want), FormatClusterID(h.ClusterId))
		}
		return fmt.Errorf("%w: cluster %q: its endpoints answer as etcd cluster %s, the map pins %s; if the name now means another cluster, pin it (baton clusters pin) and raise the epoch above %d (baton clusters check-move)",
			ErrIdentity, k.c.Name, FormatClusterID(h.ClusterId), FormatClusterID(want), k.c.Epoch)
	}
	if h.Revision > 0 && h.Revision < k.floor {
		return fmt.Errorf("%w: cluster %q: etcd cluster %s is at revision %d, below the %d it had reached when pinned: it was rebuilt or restored, and its tokens restart lower; pin it again (baton clusters pin) and raise the epoch above %d (baton clusters check-move)",
			ErrIdentity, k.c.Name, FormatClusterID(h.ClusterId), h.Revision, k.floor, k.c.Epoch)
	}
	return nil
}

// unary checks the header of every unary response (KV, transactions,
// leases, cluster and maintenance calls): a lock or a term is never handed
// out from a response that failed the check.
func (k *identityCheck) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return err
	}
	if r, ok := reply.(interface{ GetHeader() *pb.ResponseHeader }); ok {
		return k.check(r.GetHeader())
	}
	return nil
}

// stream checks the header of every message a stream receives (watch
// events, lease keep-alives, snapshots): a stream the balancer sends to a
// member of another cluster, one that did not answer when the connection
// opened, delivers nothing from it. The error is not retried by the etcd
// client: a watch on it ends with it, and the lease keep-alive loop opens
// a new stream.
func (k *identityCheck) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &checkedStream{ClientStream: s, k: k}, nil
}

type checkedStream struct {
	grpc.ClientStream
	k *identityCheck
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if r, ok := m.(interface{ GetHeader() *pb.ResponseHeader }); ok {
		return s.k.check(r.GetHeader())
	}
	return nil
}

// DialOptions are the gRPC dial options that make an etcd client of
// cluster c refuse every response, unary or on a stream, from another etcd cluster than the one
// c pins (or, when c pins none, than the first one it meets), and every
// response below c's pinned revision, with an error wrapping ErrIdentity.
// The Router's clients have them; a program that dials a map's cluster
// itself adds them to clientv3.Config.DialOptions. Each client needs its
// own.
func (c Cluster) DialOptions() []grpc.DialOption {
	k := newIdentityCheck(c)
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(k.unary), grpc.WithChainStreamInterceptor(k.stream)}
}

// verifyPinned checks, on a connection just opened to a cluster that pins
// its identity, that the cluster behind the endpoints is that one (the
// check of DialOptions on the answers of Identify), before the connection
// is handed out.
func verifyPinned(ctx context.Context, cli *clientv3.Client, c Cluster) error {
	if c.ID == "" {
		return nil
	}
	_, err := Identify(ctx, cli)
	return err
}
