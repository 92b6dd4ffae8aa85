// Package sdk is the Go client for FluxVM's APIs: the node API of one
// fluxvm-agent node (NodeClient) and central's fleet API (FleetClient).
// fluxctl uses nothing else, so everything the CLI can do, a program can do
// too. Refusals are *APIError (with the server's message and hint) and
// unreachable servers *ConnectError; IsNotFound, IsQuota and the other Is*
// helpers branch on them.
//
// The fleet API's resource types here are central's one definition of
// those resources: central stores the policy, quotas and catalog images as
// they are, and its records of tenants, leases, pools, drains and nodes
// embed the sdk type (adding only what no answer shows, and leaving out
// what is derived, such as Lease.Active). A field renamed or re-encoded
// here therefore changes what central keeps in etcd too, and central's
// store tests, which read records of the existing layout, fail on it.
package sdk
