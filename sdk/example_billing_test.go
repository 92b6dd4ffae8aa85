package sdk_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/fluxvm/fluxvm/sdk"
)

// A tenant reads its statement for a month: one line per lease and per kind
// of VM time. Amount is exact to a millionth; AmountDisplay is in cents,
// shared out so the printed lines add up to TotalDisplay. This month has no
// lines: the example tenant did not exist then.
func ExampleFleetClient_Statement() {
	ctx := context.Background()
	fleet, err := sdk.NewFleetClient(os.Getenv("CENTRAL_URL"), sdk.WithToken(os.Getenv("FLUXVM_AGENT_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	st, err := fleet.Statement(ctx, sdk.StatementQuery{Month: "2025-12"})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range st.Lines {
		fmt.Printf("%-40s %12s %-9s × %8s = %8s\n", l.Description, l.Quantity, l.Unit, l.UnitPrice, l.AmountDisplay)
	}
	fmt.Printf("%s for %s: %d lines, total %s\n", st.Month, st.TenantName, len(st.Lines), st.TotalDisplay)
	if st.Forecast != nil { // only the month under way has a forecast and a budget
		fmt.Printf("forecast %s %s\n", st.ForecastDisplay, st.Currency)
	}
	// Output:
	// 2025-12 for example: 0 lines, total 0.00
}
