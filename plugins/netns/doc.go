// Package netns is FluxVM's built-in network plugin for Linux hosts: per
// tenant a bridge holding the tenant subnet's gateway, per VM a tap on it,
// and nftables rules that drop traffic between tenants and masquerade the
// tenants' egress. It keeps no state of its own: the links' names and aliases
// and the rules' comments are its records, so a restarted plugin finds
// everything again.
//
// It runs as `fluxvm-agent plugin netns` and works in the network namespace
// it is started in.
package netns
