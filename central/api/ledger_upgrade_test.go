package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/billing/billingtest"
	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAnUpgradedCentralBillsAnOlderLedgerAsBefore starts a central
// (central.Run) on an etcd whose ledger a central from before the month
// index wrote: every tenant's statement for October, asked at once (while
// the ledger may still be being indexed) and again once it is indexed, is
// what package billing computes from the rows.
func TestAnUpgradedCentralBillsAnOlderLedgerAsBefore(t *testing.T) {
	ctx := context.Background()
	st := fxStore(t, nil)
	month := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var prices billing.Prices
	if err := json.Unmarshal([]byte(bxSpecPrices), &prices); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutPrices(ctx, prices, month.AddDate(0, -2, 0)); err != nil {
		t.Fatal(err)
	}
	history, err := st.PriceHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vms, leases := billingtest.Ledger(7, 5, 400, month)
	bbLoad(t, st, vms, leases)

	want := func() []billing.Statement {
		sts := billing.ComputeStatements(month, history, vms, leases, time.Now())
		// As the API writes and reads them.
		data, err := json.Marshal(sts)
		if err != nil {
			t.Fatal(err)
		}
		var out []billing.Statement
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}()
	if len(want) != 5 {
		t.Fatalf("billing computes %d statements for October, want one per tenant", len(want))
	}
	url := startFxCentral(t, central.Options{EtcdEndpoints: st.Endpoints(), ReconcileEvery: time.Hour})
	check := func(when string) {
		t.Helper()
		var list sdk.StatementList
		fxMust(t, "GET", url+"/fleet/billing?month=2026-10", fxToken, nil, http.StatusOK, &list)
		var got []billing.Statement
		for _, s := range list.Statements {
			got = append(got, s.Statement)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: October's statements\n%+v\nwant billing's\n%+v", when, got, want)
		}
	}
	check("at the start")
	fxWait(t, "the ledger indexed", 30*time.Second, func() bool {
		r, err := st.Client().Get(ctx, st.Prefix()+"migrations/"+store.LedgerIndexMigration, clientv3.WithCountOnly())
		return err == nil && r.Count == 1
	})
	check("once indexed")
}
