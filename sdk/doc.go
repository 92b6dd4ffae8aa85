// Package sdk is the Go client for FluxVM's APIs: the node API of one
// fluxvm-agent node and, later, central's fleet API. fluxctl uses nothing
// else, so everything the CLI can do, a program can do too.
package sdk
