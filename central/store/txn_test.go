package store

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestUnchangedFailsOnAnyWriteToWhatWasRead: a write guarded by unchanged
// fails when a key read was rewritten, when a key read as absent appeared,
// and when a key appeared under a prefix read; it succeeds when only keys
// outside what was read changed.
func TestUnchangedFailsOnAnyWriteToWhatWasRead(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	p := s.Prefix() + "txn-test/"
	if _, err := s.client.Put(ctx, p+"k", "1"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		write func() error
		holds bool
	}{
		{"nothing read changed", func() error { _, err := s.client.Put(ctx, p+"elsewhere", "x"); return err }, true},
		{"a key read was rewritten", func() error { _, err := s.client.Put(ctx, p+"k", "2"); return err }, false},
		{"a key read as absent appeared", func() error { _, err := s.client.Put(ctx, p+"absent", "x"); return err }, false},
		{"a key appeared under a prefix read", func() error { _, err := s.client.Put(ctx, p+"dir/new", "x"); return err }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.client.Txn(ctx).Then(clientv3.OpGet(p+"k"), clientv3.OpGet(p+"absent"), clientv3.OpGet(p+"dir/", clientv3.WithPrefix())).Commit()
			if err != nil {
				t.Fatal(err)
			}
			var krev int64
			if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
				krev = kvs[0].ModRevision
			}
			if err := tc.write(); err != nil {
				t.Fatal(err)
			}
			w, err := s.client.Txn(ctx).If(unchanged(r.Header.Revision, []readKey{{p + "k", krev}, {p + "absent", 0}}, p+"dir/")...).
				Then(clientv3.OpPut(p+"out", tc.name)).Commit()
			if err != nil {
				t.Fatal(err)
			}
			if w.Succeeded != tc.holds {
				t.Errorf("write succeeded = %v, want %v", w.Succeeded, tc.holds)
			}
			// Put the world back for the next case.
			if _, err := s.client.Delete(ctx, p+"absent"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
