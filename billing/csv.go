package billing

import (
	"encoding/csv"
	"io"
	"strconv"
)

// CSVCell makes s safe to open in a spreadsheet: a cell that starts with =, +,
// - or @ would be run as a formula, so it gets a leading apostrophe, which
// spreadsheets take as "this is text". A leading tab or carriage return gets
// one too, because some spreadsheets skip those and then read the formula
// behind them.
func CSVCell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + s
	}
	return s
}

// csvWriter writes every cell through CSVCell, so no caller can forget it.
type csvWriter struct{ w *csv.Writer }

func (c csvWriter) row(cells ...string) error {
	for i := range cells {
		cells[i] = CSVCell(cells[i])
	}
	return c.w.Write(cells)
}

func (c csvWriter) flush() error {
	c.w.Flush()
	return c.w.Error()
}

// WriteUsageCSV writes one row per tenant with the figures in hours (six
// decimals, computed from the integer seconds) and memory in GiB-hours.
func WriteUsageCSV(w io.Writer, us []Usage) error {
	c := csvWriter{csv.NewWriter(w)}
	if err := c.row("tenant", "vm_hours", "vcpu_hours", "memory_gib_hours", "macos_vm_hours",
		"lease_hours", "billable_lease_hours", "vms_started", "leases_started"); err != nil {
		return err
	}
	for _, u := range us {
		err := c.row(u.Tenant,
			decimal6(u.VMSeconds, secondsPerHour), decimal6(u.VCPUSeconds, secondsPerHour),
			decimal6(u.MemoryMiBSeconds, mibSecondsPerGiBH), decimal6(u.MacOSVMSeconds, secondsPerHour),
			decimal6(u.LeaseSeconds, secondsPerHour), decimal6(u.BillableLeaseSeconds, secondsPerHour),
			strconv.FormatInt(u.VMsStarted, 10), strconv.FormatInt(u.LeasesStarted, 10))
		if err != nil {
			return err
		}
	}
	return c.flush()
}

// WriteStatementsCSV writes every line of the statements for invoicing, then a
// "total" row per statement. Amounts are the displayed cents, so a tenant's
// rows add up to its total row; unit prices are exact.
func WriteStatementsCSV(w io.Writer, sts []Statement) error {
	c := csvWriter{csv.NewWriter(w)}
	if err := c.row("tenant", "month", "kind", "description", "lease_id", "node",
		"quantity", "unit", "unit_price", "amount", "currency"); err != nil {
		return err
	}
	for _, st := range sts {
		for _, l := range st.Lines {
			err := c.row(st.Tenant, st.Month, l.Kind, l.Description, l.LeaseID, l.Node,
				l.Quantity, l.Unit, l.UnitPrice.String(), l.AmountDisplay, st.Currency)
			if err != nil {
				return err
			}
		}
		if err := c.row(st.Tenant, st.Month, "total", "Total", "", "", "", "", "", st.TotalDisplay, st.Currency); err != nil {
			return err
		}
	}
	return c.flush()
}
