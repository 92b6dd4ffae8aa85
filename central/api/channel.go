package api

import (
	"bufio"
	"fmt"
	"net"
	"net/http"

	"github.com/fluxvm/fluxvm/central/channel"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/mux"
	"github.com/gorilla/websocket"
)

// channelUpgrader upgrades a node's channel request. Nodes are not
// browsers, so there is no Origin to check; the fleet token (the guard)
// is what lets one in.
var channelUpgrader = websocket.Upgrader{
	ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10,
	CheckOrigin: func(*http.Request) bool { return true },
	Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
		jsonapi.WriteError(w, status, "node channel: "+reason.Error(),
			"GET /fleet/nodes/{name}/channel is a WebSocket a node agent opens (its central { url, token }), not a call for people")
	},
}

// nodeChannel takes a node's channel: the WebSocket the node agent opens
// and keeps open, over which central calls the node's API (package
// channel). It returns when the channel ends.
func (s *Server) nodeChannel(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	if !store.ValidName(name) {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("node name %q is not valid", jsonapi.Echo(name)),
			"node names are 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (the node's HCL `name`)")
		return
	}
	ws, err := channelUpgrader.Upgrade(hijacker{w}, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	_ = s.nodes.Channels().Serve(r.Context(), name, wsconn.New(ws), s.log.Named("channel"))
}

// hijacker hands the upgrader the connection under the server's response
// writer wrappers (the metrics' codeWriter), which http.ResponseController
// finds through their Unwrap; gorilla looks for http.Hijacker itself.
type hijacker struct{ http.ResponseWriter }

func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(h.ResponseWriter).Hijack()
}

// NodeChannels is the registry of the node channels this central holds:
// central closes it when it stops and registers it for /metrics.
func (s *Server) NodeChannels() *channel.Registry { return s.nodes.Channels() }
