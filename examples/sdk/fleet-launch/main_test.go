package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

func TestExampleLaunchesThroughARealCentral(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "example", map[string]int64{"max_vms": 1})
	fleet, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(t.Context(), fleet, &out, "example-1", "debian-minimal", false); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"tenant example uses 0 VMs (quota 1", "example-1 (vm-", "runs on node-1: ", "the end of its console", "deleted example-1"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	if list, err := fleet.ListVMs(t.Context()); err != nil || len(list.VMs) != 0 {
		t.Fatalf("the example left VMs behind: %+v, %v", list, err)
	}
}
