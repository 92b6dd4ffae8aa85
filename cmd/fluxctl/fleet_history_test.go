package main

import (
	"testing"

	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetSyncAndHistoryOnACentralInNoFleetSayWhatToDo: against a real
// central that joined no fleet, fleet sync reads consent_required and
// refuses to preview, consent or drain with what to do; fleet history
// shows no rows; wrong flags are refused before anything is sent.
// (central/api's history tests drain between two paired centrals.)
func TestFleetSyncAndHistoryOnACentralInNoFleetSayWhatToDo(t *testing.T) {
	f := fleettest.Start(t)
	c := fleetCLI(f, f.OperatorToken)
	c.tty().run(t, "fleet", "sync", "--status").ok(t, "sync --status").has(t, "sync --status", "consent_required", "in no fleet")
	for _, args := range [][]string{{"fleet", "sync", "--preview"}, {"fleet", "sync", "--enable"}, {"fleet", "sync"}} {
		c.run(t, args...).refused(t, "fleet sync", "this central is in no fleet", "join a fleet first")
	}
	c.run(t, "fleet", "sync", "--enable", "--disable").refused(t, "two flags", "give at most one of", "usage: fluxctl fleet sync")
	c.tty().run(t, "fleet", "history").ok(t, "history").has(t, "history", "no history yet", "fleet sync --enable")
	c.run(t, "fleet", "history", "-o", "json").ok(t, "history -o json").has(t, "history json", `"totals"`, `"rows": []`)
	c.run(t, "fleet", "history", "--since", "yesterday").refused(t, "--since", `"yesterday" is not a time`, "usage: fluxctl fleet history")
	c.run(t, "fleet", "history", "--limit", "5000").refused(t, "--limit", "limit", "")
}
