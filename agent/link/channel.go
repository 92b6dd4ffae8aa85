package link

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/fluxvm/fluxvm/central/channel"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
)

// Backoff of the channel's redials: from MinBackoff, doubling up to
// MaxBackoff, each wait jittered, so a restarted central is reached again
// within a few seconds and a fleet of nodes does not redial in lockstep.
const (
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 2 * time.Second
)

// ChannelOptions configure RunChannel.
type ChannelOptions struct {
	// CentralURL is central's base URL; Token its credential for this node.
	CentralURL, Token string
	// Node is this node's name in the fleet.
	Node string
	// Handler is the node API, served on every stream central opens.
	Handler http.Handler
	Logger  hclog.Logger
	Version string
	// Connected, if set, is called each time a channel is up (tests).
	Connected func()
}

// ChannelPath is the route of central that takes node's channel.
func ChannelPath(node string) string {
	return "/fleet/nodes/" + url.PathEscape(node) + "/channel"
}

// RunChannel keeps this node's channel to central open until ctx ends: it
// dials central's WebSocket, runs the yamux server end on it and serves the
// node API on each stream central opens, and when the channel ends it
// dials again with backoff. A refused dial (a wrong token, an old central
// without the route) is retried too, at MaxBackoff. It logs once per state
// change, as Run does. The VMs do not depend on it: a node whose central is
// away keeps running them.
func RunChannel(ctx context.Context, opts ChannelOptions) error {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	client, err := sdk.NewFleetClient(opts.CentralURL, sdk.WithToken(opts.Token),
		sdk.WithUserAgent("fluxvm-agent/"+opts.Version))
	if err != nil {
		return fmt.Errorf("central channel: %w", err)
	}
	backoff := MinBackoff
	var lastErr string
	var lastLogged time.Time
	everUp := false
	for ctx.Err() == nil {
		began := time.Now()
		err := serveChannel(ctx, client, opts, log, func() {
			if everUp {
				log.Info("channel to central is back", "central", opts.CentralURL, "node", opts.Node)
			} else {
				log.Info("channel to central open", "central", opts.CentralURL, "node", opts.Node)
			}
			everUp, lastErr = true, ""
			if opts.Connected != nil {
				opts.Connected()
			}
		})
		if ctx.Err() != nil {
			break
		}
		msg := err.Error()
		if msg != lastErr || time.Since(lastLogged) >= repeatEvery {
			log.Warn("no channel to central; redialling", "central", opts.CentralURL, "node", opts.Node, "error", msg)
			lastErr, lastLogged = msg, time.Now()
		}
		// A channel that stayed up a while starts the backoff over; a
		// refusal will not change by redialling fast.
		var ae *sdk.APIError
		switch {
		case errors.As(err, &ae):
			backoff = MaxBackoff
		case time.Since(began) > 10*time.Second:
			backoff = MinBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		backoff = min(2*backoff, MaxBackoff)
	}
	log.Info("channel to central closed: the node agent is stopping", "node", opts.Node)
	return nil
}

// serveChannel dials the channel and serves the node API on it until it
// ends; up is called once it is open. It returns why the channel ended.
func serveChannel(ctx context.Context, client *sdk.FleetClient, opts ChannelOptions, log hclog.Logger, up func()) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := client.DialWebSocket(dctx, ChannelPath(opts.Node))
	cancel()
	if err != nil {
		return err
	}
	session, err := yamux.Server(conn, channel.YamuxConfig(log.Named("yamux")))
	if err != nil {
		conn.Close()
		return err
	}
	// The agent stopping ends the channel in order: a WebSocket close message
	// first (going away), so central reads an orderly end, not a broken one.
	stop := context.AfterFunc(ctx, func() {
		_ = conn.CloseWith(websocket.CloseGoingAway, "the node agent is stopping")
		session.Close()
	})
	defer stop()
	up()
	srv := &http.Server{Handler: opts.Handler, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	err = srv.Serve(session) // returns when the session ends; it closes the session
	<-session.CloseChan()
	if errors.Is(err, yamux.ErrSessionShutdown) || err == nil {
		err = errors.New("central closed the channel or stopped answering")
	}
	// Streams in flight (a long exec, a log stream) end with the channel.
	_ = srv.Close()
	return err
}
