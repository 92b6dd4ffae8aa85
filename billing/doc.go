// Package billing turns central's ledger of VMs and leases into metered usage
// and monthly statements under the operator's price history. It is pure
// computation: central reads the rows and prices from etcd and passes them in,
// and the only output besides values is CSV written to an io.Writer.
//
// # What is charged
//
// A lease is charged at the hourly price fixed when it started (the largest
// Mac class the leased Mac meets, see Prices.LeasePrice), so later price
// changes never reach it. It is billed from its start until it is released,
// but at least until its minimum end, however and whenever it was released;
// while active it is billed up to now or its minimum end, whichever is later,
// and never past the end agreed when it was taken (EndsAt).
//
// VM time is charged per hour of running, with a flat rate per VM, a rate per
// vCPU, one per GiB of memory and a surcharge for macOS guests, at the prices
// in effect at each moment. The hours a VM runs on a Mac while its own tenant
// holds a lease on that Mac are already paid by the lease and cost nothing,
// unless the price list sets ChargeVMsOnLeasedMacs; hours before the lease
// began or after it ended are charged as on a shared host. Another tenant's
// lease of the host frees nothing.
//
// A statement covers one calendar month in UTC: one line per lease billed in
// it, and one line per kind of VM time and price (a month with no price change
// has at most one line per kind). For the month under way it carries a
// forecast: the total if everything running now keeps running, and every
// active lease is kept, to the month's end.
//
// # Whole seconds
//
// Every instant is truncated to its whole second (UTC) before use, so every
// duration is an exact number of seconds. Usage over a window therefore equals
// the sum of the usage over any split of it, and a lease that crosses a month
// boundary has its seconds divided between the two months without a second
// lost or counted twice.
//
// # Money
//
// Amounts are Micros, integer millionths of the currency unit; in JSON they are
// exact decimal numbers (0.85), never floats. A line's amount is its unit price
// times its whole quantity, rounded down once to a millionth, with 128-bit
// intermediates so large products cannot overflow; the total is the exact sum
// of the lines. Rounding to cents happens only for display: the total is
// rounded half-up, and the cents of the lines are shared out by largest
// remainder so the printed lines always add up to the printed total.
//
// A lease's amount in each month is its cost up to the month's end less its
// cost before the month, so the months of a lease add up to exactly what it
// would cost billed at once.
package billing
