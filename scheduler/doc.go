// Package scheduler decides which node takes a VM: it filters a snapshot of the
// fleet through fixed rules, scores the nodes that pass and picks one, recording a
// human reason for the choice and for every refusal. It touches no etcd and no
// network, so central can call it inside its reservation retry loop and tests can
// walk every rule.
//
// # Filters
//
// Place runs these filters on every node, in this order, and records each
// refusal (a node may have several; the first counts in the summary).
// PlaceShort runs the same filters and makes the same choice, but keeps only
// a short list of the best fitting nodes and writes no refusal unless no node
// fits (central's watched placement uses it; a 2,000-node fleet then costs a
// pass of comparisons, not 2,000 verdicts):
//
//  1. down: the node is not reporting ("not reporting").
//  2. guest OS: the node is unhealthy, or none of its healthy drivers runs the
//     guest OS ("no healthy driver runs macos guests").
//  3. cordoned, 4. draining, 5. scrub pending: the node takes no new VM, not even
//     an operator's pinned one (uncordon, finish the drain or scrub first).
//  6. node selector: every key=value of the request must be a label of the node
//     ("label rack=a1 does not match"). The node's own value is not quoted because
//     tenants may not see labels.
//  7. nested: nested virtualisation wanted but not offered.
//  8. tenant network: a VM in its tenant's network (Request.TenantNetwork)
//     needs a node with a network plugin up ("no tenant network plugin").
//  9. resources: free vCPUs and memory ("needs 4 vCPUs, 2 free").
//  10. macOS: a macOS guest needs a Mac with a free macOS slot. Apple's licence
//     allows two macOS guests per Mac, so a node never gets more than
//     MacOSSlotsPerMac whatever it reports; a Mac that reports no slot count gets
//     the licence's two.
//  11. leases (see below).
//
// # Lease rules
//
//   - require_lease_for_macos: a tenant's macOS guest runs only on a Mac that
//     tenant leases. Operator requests (Tenant "") are not bound by it: the
//     operator's own macOS guests (CI pools, images) run on unleased Macs.
//   - exclusive_leased_hosts: a leased host runs only its lessee's VMs. An
//     operator request lands on a leased host only when it names that node
//     (Request.Node): an operator who pins a node means it, and an unpinned
//     operator VM must never take a tenant's paid-for sole use by accident.
//   - A tenant's Linux guest goes to shared, unleased nodes or to hosts that
//     tenant leases. With exclusive_leased_hosts off it may also use other
//     tenants' leased hosts, because the operator chose to allow sharing.
//
// A refusal shown to a tenant never names another tenant ("leased by another
// tenant"), because another tenant's objects are invisible to it.
//
// # Scores
//
// A node's fill after placement is the mean of its vCPU and memory fractions (and
// of its macOS slot fraction for a macOS guest). BinPack (the default) prefers the
// fullest node, which keeps whole hosts empty for leases and large VMs; Spread
// prefers the emptiest. A Linux guest prefers any node that is not a Mac, whatever
// the strategy, because Mac memory taken by Linux is memory no macOS guest, which
// can run nowhere else, can use. Equal scores go to the node whose name sorts
// first, so the same snapshot always gives the same answer.
package scheduler
