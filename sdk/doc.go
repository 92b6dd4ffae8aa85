// Package sdk is the Go client for FluxVM's APIs: the node API of one
// fluxvm-agent node (NodeClient) and central's fleet API (FleetClient).
// fluxctl uses nothing else, so everything the CLI can do, a program can do
// too. Refusals are *APIError (with the server's message and hint) and
// unreachable servers *ConnectError; IsNotFound, IsQuota and the other Is*
// helpers branch on them.
package sdk
