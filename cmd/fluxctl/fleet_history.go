package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// fleet sync and fleet history: a member central's history push to its
// fleet's owner (docs/history.md), and the owner's view of what arrived.

const hintSync = "fluxctl fleet sync --preview shows what would go; --enable turns the push on"

// syncCmd is fleet sync [--preview|--enable|--disable|--status].
func (f *fleet) syncCmd() *cobra.Command {
	var preview, enable, disable, status bool
	c := &cobra.Command{
		Use:   "sync",
		Short: "Push this member central's finished VMs to its fleet's owner (off until you consent)",
		Long: `A member central sends its finished VM ledger rows, and each VM's activity
records, to the owner of its fleet, once its operator consented. Joining is
not consent: --preview shows what would go (and what never goes), --enable
shows it again and turns the push on, --disable turns it off. Without a
flag, sync drains now; --status shows where the push stands.`,
		Example: `  fluxctl fleet sync --preview
  fluxctl fleet sync --enable
  fluxctl fleet sync
  fluxctl fleet sync --status`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			n := 0
			for _, b := range []bool{preview, enable, disable, status} {
				if b {
					n++
				}
			}
			if n > 1 {
				return usageError(c, "give at most one of --preview, --enable, --disable and --status")
			}
			hints := map[int]string{409: "join a fleet first (fluxctl fleet join), and consent: " + hintSync}
			switch {
			case preview:
				pv, err := fc.HistoryPreview(c.Context())
				if err != nil {
					return withHints(err, hints)
				}
				if !f.a.human() {
					return f.a.printRaw(pv)
				}
				f.printPreview(pv)
				return nil
			case enable, disable:
				st, err := fc.SetHistoryConsent(c.Context(), enable)
				if err != nil {
					return withHints(err, hints)
				}
				if !f.a.human() {
					return f.a.printRaw(st)
				}
				if st.Preview != nil {
					f.printPreview(st.Preview)
				}
				if enable {
					f.a.done("fluxctl fleet sync drains now; fluxctl fleet sync --status shows how it went", "history push is on")
				} else {
					f.a.done("", "history push is off: nothing more is sent")
				}
				return nil
			}
			var st *sdk.HistorySyncStatus
			var err error
			if status {
				st, err = fc.HistorySync(c.Context())
			} else {
				st, err = fc.DrainHistory(c.Context())
			}
			if err != nil {
				return withHints(err, hints)
			}
			if !f.a.human() {
				return f.a.printRaw(st)
			}
			w := f.a.stdout
			fmt.Fprintf(w, "state      %s\n", st.State)
			if st.Reason != "" {
				fmt.Fprintf(w, "reason     %s\n", st.Reason)
			}
			fmt.Fprintf(w, "consent    %v\n", st.Consent)
			if st.Owner != "" {
				fmt.Fprintf(w, "owner      %s\n", st.Owner)
			}
			fmt.Fprintf(w, "acked      %d rows\n", st.Acked)
			if st.LastDrain != nil {
				fmt.Fprintf(w, "last drain %s\n", st.LastDrain.Local().Format(time.RFC3339))
			}
			for _, r := range st.Retired {
				fmt.Fprintf(w, "retired    %s (vm %s): %s\n", r.Row, r.VM, r.Reason)
			}
			return nil
		}),
	}
	fl := c.Flags()
	fl.BoolVar(&preview, "preview", false, "show what the push would send, and what it never sends")
	fl.BoolVar(&enable, "enable", false, "show the preview, then turn the push on")
	fl.BoolVar(&disable, "disable", false, "turn the push off: the next drain sends nothing")
	fl.BoolVar(&status, "status", false, "show where the push stands")
	return c
}

func (f *fleet) printPreview(pv *sdk.HistoryPreview) {
	w := f.a.stdout
	fmt.Fprintf(w, "finished VMs   %d (%d not yet sent, %d retired)\n", pv.Rows, pv.UnsentRows, pv.Retired)
	fmt.Fprintf(w, "activity logs  %d\n", pv.Payloads)
	fmt.Fprintf(w, "bytes          %s in all, %s not yet sent\n", byteSize(pv.Bytes), byteSize(pv.UnsentBytes))
	fmt.Fprintf(w, "never sent     %s\n", strings.Join(pv.NeverSent, "\n               "))
}

func historyColumns() []column[sdk.HistoryEntry] {
	return []column[sdk.HistoryEntry]{
		{"vm", "VM", false, func(r *sdk.HistoryEntry) string { return r.VM }},
		{"member", "MEMBER", false, func(r *sdk.HistoryEntry) string { return r.Member }},
		{"tenant", "TENANT", false, func(r *sdk.HistoryEntry) string { return r.Tenant }},
		{"node", "NODE", false, func(r *sdk.HistoryEntry) string { return r.Node }},
		{"ran", "RAN", false, func(r *sdk.HistoryEntry) string { return short(r.EndedAt.Sub(r.StartedAt)) }},
		{"ended", "ENDED", false, func(r *sdk.HistoryEntry) string { return r.EndedAt.Local().Format("2006-01-02 15:04") }},
		{"size", "SIZE", true, func(r *sdk.HistoryEntry) string { return fmt.Sprintf("%d vCPU %d MiB", r.VCPUs, r.MemoryMiB) }},
		{"reason", "END REASON", true, func(r *sdk.HistoryEntry) string { return r.EndReason }},
		{"id", "ROW", true, func(r *sdk.HistoryEntry) string { return r.ID }},
	}
}

// historyCmd is fleet history: the finished VMs members pushed to this owner.
func (f *fleet) historyCmd() *cobra.Command {
	var q sdk.HistoryFilter
	var since, until string
	c := &cobra.Command{
		Use:   "history",
		Short: "The finished VMs your fleet's members pushed to this owner, newest first",
		Long: `The rows member centrals pushed (fluxctl fleet sync on each member), newest
end first, with totals over everything the filters leave. The owner keeps a
row 90 days after it arrived.`,
		Example: `  fluxctl fleet history
  fluxctl fleet history --member site-b --tenant acme --since 2026-01-01T00:00:00Z`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			for _, p := range []struct {
				s  string
				to *time.Time
			}{{since, &q.From}, {until, &q.To}} {
				if p.s == "" {
					continue
				}
				t, err := time.Parse(time.RFC3339, p.s)
				if err != nil {
					return usageError(c, fmt.Sprintf("%q is not a time like 2026-01-31T00:00:00Z", p.s))
				}
				*p.to = t
			}
			l, err := fc.History(c.Context(), q)
			if err != nil {
				return err
			}
			after := fmt.Sprintf("%d finished VMs, %s of VM time", l.Totals.Rows, short(time.Duration(l.Totals.VMSeconds)*time.Second))
			for m, n := range l.Totals.ByMember {
				after += fmt.Sprintf("\n  %s: %d", m, n)
			}
			return show(f.a, c, table[sdk.HistoryEntry]{raw: l, rows: l.Rows, cols: historyColumns(), after: after + "\n",
				empty: "no history yet\nnext: on a member, fluxctl fleet sync --enable\n"})
		}),
	}
	fl := c.Flags()
	fl.StringVar(&q.Member, "member", "", "only this member central's rows (name or id)")
	fl.StringVar(&q.Tenant, "tenant", "", "only this tenant's rows (its name on its member)")
	fl.StringVar(&since, "since", "", "only VMs that ended at or after this time (RFC 3339)")
	fl.StringVar(&until, "until", "", "only VMs that ended at or before this time (RFC 3339)")
	fl.IntVar(&q.Limit, "limit", 100, "at most this many rows (1-1000)")
	columnsFlag(c, historyColumns())
	return c
}
