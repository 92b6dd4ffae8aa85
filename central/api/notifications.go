package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/webhooks"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Limits of GET /fleet/notifications (schemas/fleet-openapi.yaml holds the
// same range, and inBounds enforces it before the handler runs).
const (
	defaultNotificationLimit = 50
	maxNotificationLimit     = 500
)

// webhookOutboxBatch is how many notifications one dispatch pass reads.
const webhookOutboxBatch = 100

// listNotifications is GET /fleet/notifications: the newest notifications,
// newest first; a tenant's own, or every one for the operator.
func (s *Server) listNotifications(w http.ResponseWriter, r *http.Request) {
	limit, ok := jsonapi.IntParam(w, r, "limit", defaultNotificationLimit, 1, maxNotificationLimit)
	if !ok {
		return
	}
	ns, err := s.opts.Store.Notifications(r.Context(), ownerOf(r), limit)
	if err != nil {
		s.storeError(w, "read notifications", err)
		return
	}
	if ns == nil {
		ns = []sdk.Notification{}
	}
	jsonapi.Write(w, http.StatusOK, sdk.NotificationList{Notifications: ns})
}

// ownerOf is the tenant whose objects the caller sees ("" the operator).
func ownerOf(r *http.Request) string {
	if p := PrincipalOf(r.Context()); p.Tenant != nil {
		return p.Tenant.ID
	}
	return ""
}

// listWebhooks is GET /fleet/webhooks: the caller's own webhooks.
func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	ws, err := s.webhooks.List(r.Context(), ownerOf(r))
	if err != nil {
		s.storeError(w, "list webhooks", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.WebhookList{Webhooks: ws})
}

// createWebhook is POST /fleet/webhooks.
func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) {
	var req sdk.CreateWebhookRequest
	if e := jsonapi.ReadBody(w, r, &req, true, `the body is {"url": "https://hooks.example.com/fluxvm", "events": ["lease.ending"], "name": "ops"}`); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	out, err := s.webhooks.Create(r.Context(), ownerOf(r), req)
	if err != nil {
		s.webhookError(w, "create webhook", err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, out)
}

// deleteWebhook is DELETE /fleet/webhooks/{id}.
func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	if err := s.webhooks.Delete(r.Context(), ownerOf(r), mux.Vars(r)["id"]); err != nil {
		s.webhookError(w, "delete webhook", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// testWebhook is POST /fleet/webhooks/{id}/test: one delivery now.
func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request) {
	d, err := s.webhooks.Test(r.Context(), ownerOf(r), mux.Vars(r)["id"])
	if err != nil {
		s.webhookError(w, "test webhook", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, d)
}

// webhookError answers a webhook call's error for people.
func (s *Server) webhookError(w http.ResponseWriter, what string, err error) {
	var ie *webhooks.InvalidError
	var qe *store.QuotaError
	switch {
	case errors.As(err, &ie):
		jsonapi.WriteError(w, http.StatusBadRequest, ie.Msg, ie.Hint)
	case errors.As(err, &qe):
		jsonapi.WriteError(w, http.StatusTooManyRequests, "at most 10 webhooks per owner, and there are 10",
			"delete one you no longer need (fluxctl fleet webhooks rm ID), or give one webhook several events")
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no such webhook", "list yours with GET /fleet/webhooks (fluxctl fleet webhooks)")
	default:
		s.storeError(w, what, err)
	}
}

// DispatchWebhooks is one pass of webhook delivery (webhooks.Service.Dispatch);
// the leader runs it every second with its fenced context.
func (s *Server) DispatchWebhooks(ctx context.Context) (int, error) {
	return s.webhooks.Dispatch(ctx, webhookOutboxBatch)
}
