package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/mutex"
)

// observer follows one name with Observe on its own proxied client,
// recording every state, and starts a new stream now and then.
type observer struct {
	r    *runner
	n    NameInfo
	id   int
	cli  *clientv3.Client
	part *cluster.Partition
}

func (r *runner) newObserver(n NameInfo, id int) (*observer, error) {
	cli, part, err := r.proxiedClient(fmt.Sprintf("o%d", id))
	if err != nil {
		return nil, err
	}
	return &observer{r: r, n: n, id: id, cli: cli, part: part}, nil
}

// proxiedClient is a client behind a partition of its own, which the
// network faults may cut or slow.
func (r *runner) proxiedClient(name string) (*clientv3.Client, *cluster.Partition, error) {
	part, eps, err := cluster.NewPartition(r.cfg.Target.Endpoints())
	if err != nil {
		return nil, nil, err
	}
	cli, err := newClient(eps)
	if err != nil {
		part.Close()
		return nil, nil, err
	}
	r.addPart(name, part)
	return cli, part, nil
}

// addPart puts a client's partition among those the network faults
// choose from, under the client's name.
func (r *runner) addPart(name string, part *cluster.Partition) {
	r.mu.Lock()
	r.parts = append(r.parts, part)
	r.partOf = append(r.partOf, name)
	r.mu.Unlock()
}

func (o *observer) client() string { return fmt.Sprintf("o%d", o.id) }

// run observes until ctx ends; each stream lasts a random while, so that
// fresh streams start in the middle of faults too.
func (o *observer) run(ctx context.Context, rng *rand.Rand) {
	defer o.cli.Close()
	for stream := o.id * 1000; ctx.Err() == nil; stream++ {
		sctx, cancel := context.WithTimeout(ctx, time.Duration(3000+rng.IntN(12000))*time.Millisecond)
		o.stream(sctx, stream)
		cancel()
	}
}

func (o *observer) stream(ctx context.Context, stream int) {
	start := now()
	var err error
	switch o.n.Prim {
	case "mutex":
		var m *mutex.Mutex
		if m, err = mutex.New(o.cli, o.n.Name, append(o.r.laneMetrics(), mutex.WithNamespace(o.r.cfg.Namespace), mutex.WithMetricLabel(observersLabel))...); err != nil {
			break
		}
		defer m.Close()
		for s := range m.Observe(ctx) {
			if s.Err != nil {
				err = s.Err
				break
			}
			o.r.h.state(ObsState{Stream: stream, Prim: o.n.Prim, Name: o.n.Name, At: now(), Rev: s.Revision, Key: s.Key, Token: int64(s.Token)})
		}
	case "election":
		var e *election.Election
		if e, err = election.New(o.cli, o.n.Name, append(o.r.laneMetrics(), election.WithNamespace(o.r.cfg.Namespace), election.WithMetricLabel(observersLabel))...); err != nil {
			break
		}
		defer e.Close()
		for s := range e.Observe(ctx) {
			if s.Err != nil {
				err = s.Err
				break
			}
			o.r.h.state(ObsState{Stream: stream, Prim: o.n.Prim, Name: o.n.Name, At: now(), Rev: s.Revision, Key: s.Key, Token: int64(s.Token), Value: s.Value})
		}
	}
	o.r.h.streamEnded(stream, now())
	o.r.h.op(Op{Client: o.client(), Kind: o.n.Prim + ".Observe", Name: o.n.Name, Call: start, Return: now(), Err: errString(err)})
}
