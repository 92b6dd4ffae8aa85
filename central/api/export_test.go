package api

import "github.com/fluxvm/fluxvm/sdk"

// SetAfterNodeCreate sets the fault-injection point between a node's create
// and the ledger write (tests in package api_test).
func SetAfterNodeCreate(s *Server, f func(node string, vm sdk.VM)) { s.launch.AfterNodeCreate = f }

// Shortlist is the verdicts a successful launch answers with (vms.go).
var Shortlist = shortlist
