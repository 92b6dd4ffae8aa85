package tunnels

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"
)

// TicketTTL is how long a screen ticket waits for its one redemption.
const TicketTTL = 30 * time.Second

// maxTickets bounds the tickets waiting at once on this central.
const maxTickets = 4096

// ErrTooManyTickets: too many tickets wait to be redeemed (429).
var ErrTooManyTickets = errors.New("too many screen tickets wait to be redeemed")

type ticket struct {
	req     Request
	expires time.Time
}

// IssueTicket returns a one-use ticket for req, valid TicketTTL by the
// clock: the credential of a browser's WebSocket, which cannot send a
// bearer token. Only the ticket's holder learns it; the manager keeps it
// in memory, so it works on the central that issued it.
func (m *Manager) IssueTicket(req Request) (string, error) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	id := base64.RawURLEncoding.EncodeToString(b)
	now := m.opts.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, t := range m.tickets {
		if !now.Before(t.expires) {
			delete(m.tickets, k)
		}
	}
	if len(m.tickets) >= maxTickets {
		return "", ErrTooManyTickets
	}
	m.tickets[id] = ticket{req: req, expires: now.Add(TicketTTL)}
	return id, nil
}

// Redeem takes a ticket: it works once, before it expires, and gives the
// request it was issued for.
func (m *Manager) Redeem(id string) (Request, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tickets[id]
	delete(m.tickets, id)
	if !ok || !m.opts.Now().Before(t.expires) {
		return Request{}, false
	}
	return t.req, true
}
