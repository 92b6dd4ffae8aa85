package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The commands for a tenant's named API keys: fleet keys, keys create and
// keys revoke. A tenant manages its own with its primary token; the
// operator names the tenant with --tenant.

const hintKeys = "fluxctl fleet keys lists the keys by name (-o wide: with their IDs)"

// keyColumns are the columns of fleet keys.
func keyColumns(now time.Time) []column[sdk.APIKey] {
	return []column[sdk.APIKey]{
		{"name", "NAME", false, func(k *sdk.APIKey) string { return k.Name }},
		{"access", "ACCESS", false, keyAccess},
		{"last-used", "LAST USED", false, func(k *sdk.APIKey) string {
			if k.LastUsedAt.IsZero() {
				return "never"
			}
			return ago(now, k.LastUsedAt) + " ago"
		}},
		{"expires", "EXPIRES", false, func(k *sdk.APIKey) string { return keyExpiry(now, k) }},
		{"created", "CREATED", true, func(k *sdk.APIKey) string { return when(k.CreatedAt) }},
		{"id", "ID", true, func(k *sdk.APIKey) string { return k.ID }},
	}
}

func keyAccess(k *sdk.APIKey) string {
	if k.ReadOnly {
		return "read-only"
	}
	return "full"
}

// keyExpiry says when a key stops working: never, a time, or that it has.
func keyExpiry(now time.Time, k *sdk.APIKey) string {
	switch {
	case k.ExpiresAt.IsZero():
		return "never"
	case !now.Before(k.ExpiresAt):
		return "expired " + when(k.ExpiresAt)
	}
	return when(k.ExpiresAt)
}

// ownTenant refuses what cannot work before anything is sent: the operator
// has no keys or team (what) of its own and must name a tenant.
func (f *fleet) ownTenant(tenant, what string) error {
	if !f.asTenant() && tenant == "" {
		return &cliError{msg: "the operator has no " + what + " of its own: name the tenant with --tenant", hint: hintTenants}
	}
	return nil
}

// primaryTokenRefusal gives central's 403s on a tenant's keys or team
// (what) fluxctl's hints: a tenant naming a tenant, or an API key trying a
// change (change, in words) that only the primary token makes. Other
// statuses get hints.
func (f *fleet) primaryTokenRefusal(err error, tenant, what, change string, hints map[int]string) error {
	var api *sdk.APIError
	if !errors.As(err, &api) {
		return err
	}
	switch {
	case api.Status == 403 && tenant != "" && f.asTenant():
		return &cliError{msg: api.Message, hint: "a tenant manages its own " + what + ": leave --tenant out"}
	case api.Status == 403 && strings.HasPrefix(f.bearer(), sdk.APIKeyPrefix) && !strings.Contains(api.Message, "disabled"):
		return &cliError{msg: api.Message, hint: change + " with the tenant's primary token (fvt_) in --token or " + envFleetToken +
			", or ask the operator"}
	}
	return withHints(err, hints)
}

// keysTenant is ownTenant for keys.
func (f *fleet) keysTenant(tenant string) error { return f.ownTenant(tenant, "API keys") }

// keysRefusal gives central's refusals of the keys' routes fluxctl's hints.
func (f *fleet) keysRefusal(err error, tenant string) error {
	return f.primaryTokenRefusal(err, tenant, "keys", "create and revoke keys",
		map[int]string{404: hintKeys, 409: "pick another name, or revoke the old key first (fluxctl fleet keys revoke NAME)",
			429: "revoke keys nobody uses (" + hintKeys + " and when each was last used), then create this one"})
}

func (f *fleet) keysCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:     "keys [--tenant T]",
		Aliases: []string{"key"},
		Short:   "A tenant's named API keys: list, create, revoke",
		Long: `A named API key is a secret of its own for one pipeline, dashboard or
colleague, which central treats as the tenant itself. The activity log
records its name with every change, and revoking it leaves the primary fvt_
token and the other keys alone. A read-only key may only read. A tenant
holds up to 50 keys; each works for 90 days unless --expires-days says
otherwise.

Without a subcommand it lists the keys: name, access, when each was last
used and when it expires (-o wide adds the ID and creation time); keys
themselves are never shown again after they are made. A tenant's key may
list them; only the primary token makes and revokes keys (or the operator,
who names the tenant with --tenant).`,
		Example: `  fluxctl fleet keys create ci-github
  fluxctl fleet keys create grafana --read-only --expires-days 0
  fluxctl fleet keys
  fluxctl fleet keys revoke ci-github
  fluxctl fleet keys --tenant acme   # operator`,
		Args: subcommandArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			if err := f.keysTenant(tenant); err != nil {
				return err
			}
			ks, err := fc.ListKeys(c.Context(), tenant)
			if err != nil {
				return f.keysRefusal(err, tenant)
			}
			return show(f.a, c, table[sdk.APIKey]{raw: sdk.APIKeyList{Keys: ks}, rows: ks, cols: keyColumns(time.Now()),
				empty: "no API keys\nnext: fluxctl fleet keys create NAME\n"})
		}),
	}
	c.PersistentFlags().StringVar(&tenant, "tenant", "", "the tenant whose keys, by name or ID (operator)")
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	columnsFlag(c, keyColumns(time.Time{}))
	c.AddCommand(f.keyCreateCmd(&tenant), f.keyRevokeCmd(&tenant))
	return c
}

func (f *fleet) keyCreateCmd(tenant *string) *cobra.Command {
	var (
		readOnly bool
		days     int
	)
	c := &cobra.Command{
		Use:   "create NAME [--read-only] [--expires-days N]",
		Short: "Make an API key; it is printed once (the tenant's primary token, or the operator)",
		Long: `Make a named API key. The key is printed this once: central keeps only its
SHA-256 and cannot show it again. NAME is 1-63 letters, digits, '.', '_' or
'-', unique within the tenant, and not of an ID's form (key- and 16 hex
digits). --expires-days 0 makes a key that never expires.`,
		Example: `  fluxctl fleet keys create ci-github
  fluxctl fleet keys create grafana --read-only --expires-days 0
  fluxctl fleet keys create deploy --tenant acme   # operator`,
		Args: oneName("key name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if err := f.keysTenant(*tenant); err != nil {
				return err
			}
			out, err := fc.CreateKey(c.Context(), *tenant, sdk.CreateKeyRequest{Name: args[0], ReadOnly: readOnly, ExpiresDays: &days})
			if err != nil {
				return f.keysRefusal(err, *tenant)
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			k, a := out.Key, f.a
			expires := "never expires"
			if !k.ExpiresAt.IsZero() {
				expires = "expires " + when(k.ExpiresAt)
			}
			fmt.Fprintf(a.stdout, "✓ Created API key %s (%s access, %s)\n\n  key  %s\n\n", k.Name, keyAccess(&k), expires, out.Token)
			fmt.Fprintln(a.stdout, "! Store this key now: it is shown only this once (central keeps only its SHA-256).")
			fmt.Fprintf(a.stdout, "next: use it as the tenant: %s=%s fluxctl fleet status\n", envFleetToken, out.Token)
			return nil
		}),
	}
	c.Flags().BoolVar(&readOnly, "read-only", false, "the key may only read (GET)")
	c.Flags().IntVar(&days, "expires-days", sdk.DefaultKeyExpiresDays, "days the key works (0: it never expires; at most 3650)")
	return c
}

func (f *fleet) keyRevokeCmd(tenant *string) *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:     "revoke KEY",
		Aliases: []string{"rm", "delete"},
		Short:   "Revoke an API key by name or ID; it stops working at once (asks on a terminal)",
		Args:    oneName("key name or ID"),
		ValidArgsFunction: f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
			ks, err := fc.ListKeys(ctx, *tenant)
			if err != nil {
				return nil, err
			}
			var out []cobra.Completion
			for _, k := range ks {
				out = append(out, cobra.CompletionWithDesc(k.Name, keyAccess(&k)+", "+k.ID))
			}
			return out, nil
		}),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if err := f.keysTenant(*tenant); err != nil {
				return err
			}
			key := args[0]
			if !yes {
				again := "fluxctl fleet keys revoke " + key + " -y"
				if *tenant != "" {
					again += " --tenant " + *tenant
				}
				if err := f.confirm(fmt.Sprintf("revoke API key %s? whatever uses it is refused from now on", key), "revoke a key", again); err != nil {
					return err
				}
			}
			if err := fc.RevokeKey(c.Context(), *tenant, key); err != nil {
				return f.keysRefusal(err, *tenant)
			}
			if f.a.human() {
				f.a.done("", "Revoked API key %s", key)
			}
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "revoke without asking")
	return c
}
