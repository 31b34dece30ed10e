// Package guard is the transaction a handle's Txn returns: the caller's
// nested inside one that compares the holder's keys.
package guard

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Txn nests the caller's If, Then and Else under Guard's compares, so the
// caller's Else still means "your comparison failed".
type Txn struct {
	Ctx      context.Context
	KV       clientv3.KV
	Check    func() error          // run first: an error fails Commit before any request
	Guard    func() []clientv3.Cmp // the holder's compares, taken at Commit
	Rejected func() error          // the error of a Commit whose guard failed
	cmps     []clientv3.Cmp
	then     []clientv3.Op
	els      []clientv3.Op
}

func (t *Txn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.cmps = append(t.cmps, cs...); return t }
func (t *Txn) Then(ops ...clientv3.Op) clientv3.Txn { t.then = append(t.then, ops...); return t }
func (t *Txn) Else(ops ...clientv3.Op) clientv3.Txn { t.els = append(t.els, ops...); return t }

// Commit returns the caller's transaction's response, or Check's or
// Rejected's error.
func (t *Txn) Commit() (*clientv3.TxnResponse, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	resp, err := t.KV.Txn(t.Ctx).If(t.Guard()...).Then(clientv3.OpTxn(t.cmps, t.then, t.els)).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, t.Rejected()
	}
	inner := resp.Responses[0].GetResponseTxn()
	return &clientv3.TxnResponse{Header: resp.Header, Succeeded: inner.Succeeded, Responses: inner.Responses}, nil
}
