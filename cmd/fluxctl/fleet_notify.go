package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The commands for notifications and webhooks: fleet notifications, fleet
// webhooks, webhooks add, rm and test (docs/notifications.md).

const hintWebhooks = "fluxctl fleet webhooks lists yours (-o wide: with their IDs)"

// notificationColumns are the columns of fleet notifications.
func notificationColumns(tenants *tenantNames) []column[sdk.Notification] {
	return []column[sdk.Notification]{
		{"time", "TIME", false, func(n *sdk.Notification) string { return when(n.Time) }},
		{"type", "TYPE", false, func(n *sdk.Notification) string { return n.Type }},
		{"title", "TITLE", false, func(n *sdk.Notification) string { return n.Title }},
		{"tenant", "TENANT", true, func(n *sdk.Notification) string { return cmp.Or(tenants.name(n.Tenant), "-") }},
		{"detail", "DETAIL", true, func(n *sdk.Notification) string { return n.Detail }},
		{"link", "LINK", true, func(n *sdk.Notification) string { return n.Link }},
		{"id", "ID", true, func(n *sdk.Notification) string { return n.ID }},
	}
}

func (f *fleet) notificationsCmd() *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:     "notifications",
		Aliases: []string{"notification", "notes"},
		Short:   "What central told you about: leases ending, VMs, budgets, nodes (newest first)",
		Long: `The notifications central made, newest first: VMs launched and deleted,
leases made, released, ending (24 hours and 1 hour before) and ended,
budgets nearly or fully spent; for the operator also nodes down, nodes
waiting for a scrub and drains done. A tenant sees its own, the operator
everyone's. The same notifications go to webhooks (fluxctl fleet webhooks).
-o wide adds the tenant, the detail, the link and the ID.`,
		Example: `  fluxctl fleet notifications
  fluxctl fleet notifications -n 200 -o wide`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			if limit < 0 || limit > 500 {
				return usageError(c, "--limit is 1-500 (0: central's default, 50)")
			}
			ns, err := fc.ListNotifications(c.Context(), limit)
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.Notification]{raw: sdk.NotificationList{Notifications: ns}, rows: ns,
				cols: notificationColumns(f.tenantNames(c.Context(), fc)), empty: "no notifications\n"})
		}),
	}
	c.Flags().IntVarP(&limit, "limit", "n", 0, "how many of the newest (1-500; 0: central's default, 50)")
	columnsFlag(c, notificationColumns(nil))
	return c
}

// lastDelivery says how a webhook's newest delivery went.
func lastDelivery(now time.Time, w *sdk.Webhook) string {
	if len(w.Deliveries) == 0 {
		return "never"
	}
	d := w.Deliveries[0]
	state := "ok"
	switch {
	case !d.OK && d.Status != 0:
		state = fmt.Sprintf("failed (%d)", d.Status)
	case !d.OK:
		state = "failed"
	}
	return fmt.Sprintf("%s %s, %s ago", d.Event, state, ago(now, d.At))
}

// webhookColumns are the columns of fleet webhooks.
func webhookColumns(now time.Time) []column[sdk.Webhook] {
	return []column[sdk.Webhook]{
		{"name", "NAME", false, func(w *sdk.Webhook) string { return cmp.Or(w.Name, w.ID) }},
		{"url", "URL", false, func(w *sdk.Webhook) string { return w.URL }},
		{"events", "EVENTS", false, func(w *sdk.Webhook) string {
			if len(w.Events) == 0 {
				return "all"
			}
			return strings.Join(w.Events, ",")
		}},
		{"last", "LAST DELIVERY", false, func(w *sdk.Webhook) string { return lastDelivery(now, w) }},
		{"id", "ID", true, func(w *sdk.Webhook) string { return w.ID }},
		{"created", "CREATED", true, func(w *sdk.Webhook) string { return when(w.CreatedAt) }},
	}
}

// findWebhook resolves a webhook by ID or name among the caller's.
func findWebhook(ctx context.Context, fc *sdk.FleetClient, ref string) (*sdk.Webhook, error) {
	ws, err := fc.ListWebhooks(ctx)
	if err != nil {
		return nil, err
	}
	var byName []sdk.Webhook
	for _, w := range ws {
		if w.ID == ref {
			return &w, nil
		}
		if w.Name == ref {
			byName = append(byName, w)
		}
	}
	switch len(byName) {
	case 0:
		return nil, &cliError{msg: "no webhook " + ref, hint: hintWebhooks}
	case 1:
		return &byName[0], nil
	}
	return nil, &cliError{msg: fmt.Sprintf("%d webhooks are named %s", len(byName), ref), hint: "name it by ID: " + hintWebhooks}
}

func webhookHints(err error) error {
	return withHints(err, map[int]string{404: hintWebhooks,
		429: "remove a webhook you no longer need (fluxctl fleet webhooks rm ID), or give one webhook several --event"})
}

func (f *fleet) webhooksCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "webhooks",
		Aliases: []string{"webhook", "hooks"},
		Short:   "Webhooks central posts notifications to: list, add, rm, test",
		Long: `A webhook gets each notification as a signed JSON POST (X-FluxVM-Signature:
sha256=<HMAC-SHA256 of the body with the webhook's secret>), tried at once,
after 2 s and after 10 s more. A tenant's webhooks get its own
notifications and must be https to a public address; the operator's get
everyone's and may point anywhere. Each owner has at most 10.

Without a subcommand it lists them: name, URL, events and how the last
delivery went (-o wide adds the ID and creation time; -o json the last 20
deliveries).`,
		Example: `  fluxctl fleet webhooks add https://hooks.example.com/fluxvm --event lease.ending --event budget.over
  fluxctl fleet webhooks
  fluxctl fleet webhooks test whk_51a0c2e9b3f1
  fluxctl fleet webhooks rm whk_51a0c2e9b3f1`,
		Args: subcommandArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			ws, err := fc.ListWebhooks(c.Context())
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.Webhook]{raw: sdk.WebhookList{Webhooks: ws}, rows: ws, cols: webhookColumns(time.Now()),
				empty: "no webhooks\nnext: fluxctl fleet webhooks add URL --event lease.ending\n"})
		}),
	}
	columnsFlag(c, webhookColumns(time.Time{}))
	c.AddCommand(f.webhookAddCmd(), f.webhookRmCmd(), f.webhookTestCmd())
	return c
}

func (f *fleet) webhookAddCmd() *cobra.Command {
	var req sdk.CreateWebhookRequest
	c := &cobra.Command{
		Use:   "add URL [--event E ...] [--name N]",
		Short: "Add a webhook; its signing secret is printed once",
		Long: `Add a webhook. Without --event it gets every notification; each --event
names one type (` + strings.Join(sdk.NotificationTypes, ", ") + `).
The secret that signs its deliveries is printed this once.`,
		Example: `  fluxctl fleet webhooks add https://hooks.example.com/fluxvm --event lease.ending --event budget.over
  fluxctl fleet webhooks add https://chat.example.com/hook --name chat`,
		Args: oneName("URL"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			req.URL = args[0]
			for _, e := range req.Events {
				if !slices.Contains(sdk.NotificationTypes, e) {
					return usageError(c, fmt.Sprintf("unknown --event %q: the events are %s", e, strings.Join(sdk.NotificationTypes, ", ")))
				}
			}
			out, err := fc.CreateWebhook(c.Context(), req)
			if err != nil {
				return webhookHints(err)
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			w, a := out.Webhook, f.a
			events := "every event"
			if len(w.Events) > 0 {
				events = strings.Join(w.Events, ", ")
			}
			fmt.Fprintf(a.stdout, "✓ Added webhook %s (%s) for %s\n\n  secret  %s\n\n", w.ID, w.URL, events, out.Secret)
			fmt.Fprintln(a.stdout, "! Store this secret now: it is shown only this once. Receivers check X-FluxVM-Signature with it.")
			fmt.Fprintf(a.stdout, "next: fluxctl fleet webhooks test %s\n", w.ID)
			return nil
		}),
	}
	c.Flags().StringArrayVar(&req.Events, "event", nil, "a notification type it gets (repeat; none: every type)")
	c.Flags().StringVar(&req.Name, "name", "", "a name for people (1-64 letters, digits, '.', '_', '-')")
	return c
}

func (f *fleet) completeWebhooks() cobra.CompletionFunc {
	return f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
		ws, err := fc.ListWebhooks(ctx)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, w := range ws {
			out = append(out, cobra.CompletionWithDesc(w.ID, cmp.Or(w.Name, w.URL)))
		}
		return out, nil
	})
}

func (f *fleet) webhookRmCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:               "rm WEBHOOK",
		Aliases:           []string{"remove", "delete"},
		Short:             "Remove a webhook by ID or name (asks on a terminal)",
		Args:              oneName("webhook ID or name"),
		ValidArgsFunction: f.completeWebhooks(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			w, err := findWebhook(c.Context(), fc, args[0])
			if err != nil {
				return webhookHints(err)
			}
			if !yes {
				if err := f.confirm(fmt.Sprintf("remove webhook %s (%s)? it gets nothing from now on", w.ID, w.URL), "remove a webhook",
					"fluxctl fleet webhooks rm "+w.ID+" -y"); err != nil {
					return err
				}
			}
			if err := fc.DeleteWebhook(c.Context(), w.ID); err != nil {
				return webhookHints(err)
			}
			if f.a.human() {
				f.a.done("", "Removed webhook %s", w.ID)
			}
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "remove without asking")
	return c
}

func (f *fleet) webhookTestCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "test WEBHOOK",
		Short:             "Send a webhook.test notification to a webhook now, once, and say how it went",
		Args:              oneName("webhook ID or name"),
		ValidArgsFunction: f.completeWebhooks(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			w, err := findWebhook(c.Context(), fc, args[0])
			if err != nil {
				return webhookHints(err)
			}
			d, err := fc.TestWebhook(c.Context(), w.ID)
			if err != nil {
				return webhookHints(err)
			}
			if !f.a.human() {
				return f.a.printRaw(d)
			}
			if !d.OK {
				return &cliError{msg: fmt.Sprintf("the test delivery %s to %s failed: %s", d.ID, w.URL, d.Error),
					hint: "check that the receiver answers 2xx to a POST; a tenant's webhook must be https to a public address"}
			}
			f.a.done("", "Delivered %s to %s (%d)", d.ID, w.URL, d.Status)
			return nil
		}),
	}
}
