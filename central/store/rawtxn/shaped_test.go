package rawtxn_test

import (
	"context"
	"testing"

	"github.com/fluxvm/fluxvm/central/store/rawtxn"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ShapedRate sends exactly the shape's requests, on keys of each worker's own,
// and leaves behind only the leased keys (which go with the lease).
func TestShapedRateSendsTheShapeAndCleansUp(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	shape := rawtxn.Shape{Reads: 2, Txns: []rawtxn.TxnShape{
		{Compares: 2, Puts: 3, Leased: 1, ValueBytes: 10},
		{Compares: 1, Puts: 3, Fresh: 2, Deletes: 1, ValueBytes: 20},
	}}
	rev0 := revision(t, st.Client())
	rate, err := rawtxn.ShapedRate(st.Client(), "/shaped/", 3, 7, shape)
	if err != nil || rate <= 0 {
		t.Fatalf("ShapedRate = %v, %v", rate, err)
	}
	// One revision per write request: the read key's put, 7 units of 2
	// transactions, the final delete (the lease's revocation then finds no
	// key left to delete).
	if got, want := revision(t, st.Client())-rev0, int64(1+7*2+1); got != want {
		t.Fatalf("%d writes went to etcd; want %d", got, want)
	}
	r, err := st.Client().Get(ctx, "/shaped/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range r.Kvs {
		t.Errorf("left behind: %s", kv.Key)
	}
}

func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), "/none")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}
