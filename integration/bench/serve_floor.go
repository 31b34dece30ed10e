package bench

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/integration/harness"
)

// floorHold is the floor of the service's protocol: the same generated
// handler on the same HTTP/2 server, with a lock in this process's memory
// instead of etcd and the library. A Hold of a free name sends held (of
// the service's size) at once; of a held one, waits first-come in line; a
// Release sends released, ends the stream and hands the name to the next
// in line before it returns. No lease, heartbeat, token or record: what
// the service costs beyond it is the library's etcd requests and its own
// work.
type floorHold struct {
	batonv1connect.UnimplementedBatonServiceHandler

	mu    sync.Mutex
	seq   int
	names map[string][]chan struct{} // a name's line: [0] holds, the rest wait
	holds map[string]*floorHeld
}

type floorHeld struct {
	name     string
	turn     chan struct{}
	release  sync.Once
	released chan struct{} // closed by Release
	ended    chan struct{} // closed once the name was handed on
}

func newFloorHold() *floorHold {
	return &floorHold{names: make(map[string][]chan struct{}), holds: make(map[string]*floorHeld)}
}

func (f *floorHold) Hold(ctx context.Context, req *connect.Request[batonv1.HoldRequest], st *connect.ServerStream[batonv1.HoldResponse]) error {
	name := strings.Join(req.Msg.GetNames(), "\x00")
	h := &floorHeld{name: name, turn: make(chan struct{}), released: make(chan struct{}), ended: make(chan struct{})}
	f.mu.Lock()
	f.seq++
	id := strconv.FormatInt(int64(f.seq), 16)
	id = strings.Repeat("0", 32-len(id)) + id
	f.holds[id] = h
	line := append(f.names[name], h.turn)
	f.names[name] = line
	if len(line) == 1 {
		close(h.turn)
	}
	f.mu.Unlock()
	defer f.leave(id, h)
	select {
	case <-h.turn:
	case <-ctx.Done():
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	err := st.Send(&batonv1.HoldResponse{Event: &batonv1.HoldResponse_Held{Held: &batonv1.Held{
		HoldId: id, Token: 1 << 20, Keys: []string{harness.Namespace + "/v1/lock/floor/694d8a1f2b3c4d5e"}, Lease: 1 << 62,
		Ttl: durationpb.New(serveTTL), Validity: durationpb.New(serveTTL), Deadline: timestamppb.Now(), HeartbeatInterval: durationpb.New(serveTTL / 5),
	}}})
	if err != nil {
		return err
	}
	select {
	case <-h.released:
		f.leave(id, h)
		return st.Send(&batonv1.HoldResponse{Event: &batonv1.HoldResponse_Released{Released: &batonv1.Released{}}})
	case <-ctx.Done():
		return nil
	}
}

// leave takes h out of its name's line, handing the name on if it held
// it; once only.
func (f *floorHold) leave(id string, h *floorHeld) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.holds[id]; !ok {
		return
	}
	delete(f.holds, id)
	line := f.names[h.name]
	for i, t := range line {
		if t == h.turn {
			line = append(line[:i:i], line[i+1:]...)
			if i == 0 && len(line) > 0 {
				close(line[0])
			}
			break
		}
	}
	if len(line) == 0 {
		delete(f.names, h.name)
	} else {
		f.names[h.name] = line
	}
	close(h.ended)
}

func (f *floorHold) Release(ctx context.Context, req *connect.Request[batonv1.ReleaseRequest]) (*connect.Response[batonv1.ReleaseResponse], error) {
	f.mu.Lock()
	h := f.holds[req.Msg.GetHoldId()]
	f.mu.Unlock()
	if h == nil {
		return nil, connect.NewError(connect.CodeNotFound, nil)
	}
	h.release.Do(func() { close(h.released) })
	select {
	case <-h.ended:
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	return connect.NewResponse(&batonv1.ReleaseResponse{}), nil
}

// Heartbeat of no hold is NOT_FOUND, as the service's (floorCall).
func (f *floorHold) Heartbeat(context.Context, *connect.Request[batonv1.HeartbeatRequest]) (*connect.Response[batonv1.HeartbeatResponse], error) {
	return nil, connect.NewError(connect.CodeNotFound, nil)
}
