package store

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// How a deposed leader is kept from writing
//
// The leader's loops run with a context from Fenced. Every write the store makes with such a
// context (each Put, Delete and transaction goes through Store.kv) carries one more compare:
// the leader's election key still exists with the create revision it had when the election
// was won. A leader whose lease expired, or that resigned, has lost that key, so its writes
// fail as a whole with ErrNotLeader, even one sent long after a pause the loop never noticed
// (a GC stall, a suspended VM, a network partition). Plain reads are not fenced: what a
// deposed leader decides from them, it cannot write. Release is not fenced either: giving a
// reservation's room back is right whoever does it.

// ErrNotLeader: the write was made for a leadership that has been lost.
var ErrNotLeader = errors.New("no longer the leader")

type fenceKey struct{}

type fence struct {
	key string
	rev int64
}

// Fenced returns a context whose store writes hold only while l leads.
func Fenced(ctx context.Context, l *Leader) context.Context {
	return context.WithValue(ctx, fenceKey{}, fence{key: l.elect.Key(), rev: l.elect.Rev()})
}

// kv is the etcd KV to use for ctx: the client itself, or the fenced view of it when ctx is
// Fenced.
func (s *Store) kv(ctx context.Context) clientv3.KV {
	f, ok := ctx.Value(fenceKey{}).(fence)
	if !ok {
		return s.client
	}
	return &fencedKV{KV: s.client, client: s.client, f: f}
}

type fencedKV struct {
	clientv3.KV
	client *clientv3.Client
	f      fence
}

func (k *fencedKV) cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(k.f.key), "=", k.f.rev)
}

func (k *fencedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	r, err := k.Txn(ctx).Then(clientv3.OpPut(key, val, opts...)).Commit()
	if err != nil {
		return nil, err
	}
	return (*clientv3.PutResponse)(r.Responses[0].GetResponsePut()), nil
}

func (k *fencedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	r, err := k.Txn(ctx).Then(clientv3.OpDelete(key, opts...)).Commit()
	if err != nil {
		return nil, err
	}
	return (*clientv3.DeleteResponse)(r.Responses[0].GetResponseDeleteRange()), nil
}

func (k *fencedKV) Txn(ctx context.Context) clientv3.Txn {
	return &fencedTxn{ctx: ctx, kv: k, inner: k.client.Txn(ctx)}
}

// fencedTxn adds the fence to a transaction's compares. A transaction that did not hold
// because of the fence answers ErrNotLeader, not its Else branch.
type fencedTxn struct {
	ctx    context.Context
	kv     *fencedKV
	inner  clientv3.Txn
	ifDone bool
}

func (t *fencedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.inner, t.ifDone = t.inner.If(append(cs, t.kv.cmp())...), true
	return t
}

func (t *fencedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	if !t.ifDone {
		t.If()
	}
	t.inner = t.inner.Then(ops...)
	return t
}

func (t *fencedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	if !t.ifDone {
		t.If()
	}
	t.inner = t.inner.Else(ops...)
	return t
}

func (t *fencedTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.ifDone {
		t.If()
	}
	r, err := t.inner.Commit()
	if err != nil || r.Succeeded {
		return r, err
	}
	// Did it fail on the fence, or on the caller's own compares?
	g, err := t.kv.client.Get(t.ctx, t.kv.f.key)
	if err != nil {
		return nil, err
	}
	if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != t.kv.f.rev {
		return nil, fmt.Errorf("%w: election key %s is gone", ErrNotLeader, t.kv.f.key)
	}
	return r, nil
}
