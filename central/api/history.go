package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/central/history"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// History push (docs/history.md): a member central's finished VM ledger
// rows go to its owner once its operator consented. The mechanism is
// central/history's; here are its routes.

const historyHint = "docs/history.md: fluxctl fleet sync --preview shows what would go, --enable turns the push on"

// HistoryDrainEvery is how often the background drain runs on a member.
const HistoryDrainEvery = 5 * time.Minute

func (s *Server) newHistory() (*history.Pusher, *history.Ingest) {
	log := s.opts.Logger.Named("history")
	p := history.NewPusher(history.PusherOptions{Store: s.opts.Store, Now: s.opts.Now, Logger: log,
		Membership: func(ctx context.Context) (*history.Membership, error) {
			id, owner, token, ok, err := s.federation.JoinedMembership(ctx)
			if err != nil || !ok {
				return nil, err
			}
			return &history.Membership{MemberID: id, OwnerURL: owner, Token: token}, nil
		},
		Activity: s.rowActivity,
		TenantName: func(ctx context.Context, id string) string {
			if t, err := s.opts.Store.GetTenant(ctx, id); err == nil {
				return t.Name
			}
			return id
		}})
	in := history.NewIngest(history.IngestOptions{Store: s.opts.Store, Now: s.opts.Now, Retention: s.opts.HistoryRetention, Logger: log})
	return p, in
}

// rowActivity is a finished VM's activity records (those naming it while
// it ran), one JSON object a line, newest last: the row's payload.
func (s *Server) rowActivity(_ context.Context, e store.LedgerEntry) []byte {
	if s.opts.Activity == nil {
		return nil
	}
	evs := s.opts.Activity.Recent(2000, e.Tenant)
	var out []byte
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		if ev.Target != e.Name || ev.Time.Before(e.StartedAt.Add(-time.Minute)) || ev.Time.After(e.EndedAt.Add(time.Minute)) {
			continue
		}
		b, err := json.Marshal(ev)
		if err != nil || len(out)+len(b)+1 > sdk.HistoryMaxPayloadBytes {
			break
		}
		out = append(append(out, b...), '\n')
	}
	return out
}

// HistoryLoop drains this central's history to its owner every interval
// while it is a member with consent, and drops the owner's rows past
// retention (on the leader; HistoryDrainEvery when 0).
func (s *Server) HistoryLoop(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = HistoryDrainEvery
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if _, _, err := s.ingest.Reclaim(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("drop history past retention", "error", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	s.pusher.Run(ctx, every)
}

func (s *Server) historyError(w http.ResponseWriter, what string, err error) {
	switch {
	case errors.Is(err, history.ErrRefused):
		jsonapi.WriteError(w, http.StatusBadRequest, err.Error(), "fix the row on the member; a refused row is retried on later drains and retired after three")
	case errors.Is(err, history.ErrInvalid):
		jsonapi.WriteError(w, http.StatusBadRequest, err.Error(), historyHint)
	case errors.Is(err, history.ErrNoFleet):
		jsonapi.WriteError(w, http.StatusConflict, err.Error(), "join a fleet first: fluxctl fleet join OWNER_URL INVITE")
	case errors.Is(err, history.ErrConsent):
		jsonapi.WriteError(w, http.StatusConflict, err.Error(), "see what would go with fluxctl fleet sync --preview, then consent with fluxctl fleet sync --enable")
	default:
		s.log.Error("history", "op", what, "error", err)
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "could not "+what+": central's store does not answer", "retry; if it persists, check central's etcd")
	}
}

// historyStatus is GET /fleet/history/sync (the member's operator).
func (s *Server) historyStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.pusher.Status(r.Context())
	if err != nil {
		s.historyError(w, "read the history push", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, st)
}

// historyPreview is GET /fleet/history/sync/preview (the member's operator).
func (s *Server) historyPreview(w http.ResponseWriter, r *http.Request) {
	pv, err := s.pusher.Preview(r.Context())
	if err != nil {
		s.historyError(w, "preview the history push", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, pv)
}

// historyConsent is POST /fleet/history/sync/consent (the member's operator).
func (s *Server) historyConsent(w http.ResponseWriter, r *http.Request) {
	var req sdk.HistoryConsentRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	st, err := s.pusher.SetConsent(r.Context(), req.Enabled)
	if err != nil {
		s.historyError(w, "record consent", err)
		return
	}
	setTarget(r, map[bool]string{true: "on", false: "off"}[req.Enabled])
	jsonapi.Write(w, http.StatusOK, st)
}

// historyDrain is POST /fleet/history/sync (the member's operator): drain now.
func (s *Server) historyDrain(w http.ResponseWriter, r *http.Request) {
	st, err := s.pusher.Drain(r.Context(), true)
	if err != nil {
		s.historyError(w, "drain the history", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, st)
}

// historyPayloads is POST /fleet/history/payloads (a member's fleet token).
func (s *Server) historyPayloads(w http.ResponseWriter, r *http.Request) {
	var req sdk.HistoryPayloadBatch
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	n, err := s.ingest.PutPayloads(r.Context(), PrincipalOf(r.Context()).Member.ID, req.Payloads)
	if err != nil {
		s.historyError(w, "store history payloads", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.HistoryAck{Stored: n})
}

// historyRows is POST /fleet/history/rows (a member's fleet token).
func (s *Server) historyRows(w http.ResponseWriter, r *http.Request) {
	var req sdk.HistoryRowBatch
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	m := PrincipalOf(r.Context()).Member
	n, err := s.ingest.PutRows(r.Context(), m.ID, m.Name, req.Rows)
	if err != nil {
		s.historyError(w, "store history rows", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.HistoryAck{Stored: n})
}

// listHistory is GET /fleet/history (the owner's operator).
func (s *Server) listHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := sdk.HistoryFilter{Member: q.Get("member"), Tenant: q.Get("tenant")}
	for name, dst := range map[string]*time.Time{"from": &f.From, "to": &f.To} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				jsonapi.WriteError(w, http.StatusBadRequest, name+": not an RFC 3339 time", "e.g. 2026-01-31T00:00:00Z")
				return
			}
			*dst = t
		}
	}
	// Ranges (limit, the names' lengths) are the schema's, checked before this runs.
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			jsonapi.WriteError(w, http.StatusBadRequest, "limit: a number from 1 to 1000", historyHint)
			return
		}
		f.Limit = n
	}
	out, err := s.ingest.List(r.Context(), f)
	if err != nil {
		s.historyError(w, "list the fleet's history", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, out)
}
