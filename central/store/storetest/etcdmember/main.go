// Command etcdmember runs one member of an etcd cluster, with the etcd server
// central embeds, until SIGTERM: the cluster tests start three of them as
// three processes and SIGKILL one. It is a test tool; operators run etcd's
// own `etcd` (docs/central.md, "Running on an etcd cluster").
//
//	etcdmember -name m1 -data-dir DIR -client http://127.0.0.1:P1 -peer http://127.0.0.1:Q1 \
//	    -initial-cluster m1=http://127.0.0.1:Q1,m2=http://127.0.0.1:Q2,m3=http://127.0.0.1:Q3
//
// It prints "ready" on stdout once the member serves clients.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	name := flag.String("name", "", "this member's name, as in -initial-cluster")
	dir := flag.String("data-dir", "", "the member's data directory")
	client := flag.String("client", "", "the client URL to listen on and advertise")
	peer := flag.String("peer", "", "the peer URL to listen on and advertise")
	initial := flag.String("initial-cluster", "", "name=peer-url,... of every member")
	state := flag.String("initial-cluster-state", "new", "new, or existing for a member joining a running cluster")
	tickMs := flag.Uint("tick-ms", 50, "raft heartbeat interval")
	electionMs := flag.Uint("election-ms", 500, "raft election timeout")
	flag.Parse()
	if err := run(*name, *dir, *client, *peer, *initial, *state, *tickMs, *electionMs); err != nil {
		fmt.Fprintf(os.Stderr, "etcdmember %s: %v\n", *name, err)
		os.Exit(1)
	}
}

func run(name, dir, client, peer, initial, state string, tickMs, electionMs uint) error {
	if name == "" || dir == "" || client == "" || peer == "" || initial == "" {
		return fmt.Errorf("-name, -data-dir, -client, -peer and -initial-cluster are required")
	}
	cu, err := url.Parse(client)
	if err != nil {
		return fmt.Errorf("client url: %w", err)
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return fmt.Errorf("peer url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.ClusterState = initial, state
	cfg.InitialClusterToken = "fluxvm-test-cluster"
	cfg.TickMs, cfg.ElectionMs = tickMs, electionMs
	cfg.LogLevel = "error"
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "1h"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case err := <-e.Err():
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("not ready after a minute")
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	select {
	case <-stop:
		return nil
	case err := <-e.Err():
		return err
	}
}
