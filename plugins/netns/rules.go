//go:build linux

package netns

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The plugin's nftables table (family inet, named "fluxvm") has two chains:
//
//	forward      (filter, hook forward): per tenant, a counted drop of what
//	             comes in on the tenant's bridge and would leave on another
//	             tenant's bridge. Each tenant's rule covers the traffic it
//	             sends, so between any two tenants both ways are closed.
//	postrouting  (nat, hook postrouting): per tenant, masquerade of what
//	             leaves the tenant subnet through any device but its bridge.
//
// Every rule carries the comment "fluxvm tenant=<id>", which is how the
// plugin finds a tenant's rules again (and how `nft list ruleset` shows them).
// The table goes when the last tenant's rules go.

func table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
}

var accept = nftables.ChainPolicyAccept

func chains(t *nftables.Table) (forward, postrouting *nftables.Chain) {
	forward = &nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept}
	postrouting = &nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept}
	return forward, postrouting
}

// ifname is an interface name as nftables compares it: NUL-padded to 16.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// tenantRules returns the rules a tenant needs.
func tenantRules(fwd, post *nftables.Chain, tenant, bridge string, subnet netip.Prefix, nat bool) []*nftables.Rule {
	tag := userdata.AppendString(nil, userdata.TypeComment, ruleTag+tenant)
	rules := []*nftables.Rule{{
		Table: fwd.Table, Chain: fwd, UserData: tag,
		Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(bridge)},
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			// A prefix compare: oifname "fxbr-*".
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(bridgePrefix)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(bridge)},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		},
	}}
	if nat {
		mask := netip.MustParsePrefix(fmt.Sprintf("255.255.255.255/%d", subnet.Bits())).Masked().Addr().As4()
		rules = append(rules, &nftables.Rule{
			Table: post.Table, Chain: post, UserData: tag,
			Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
				// ip saddr & mask == subnet
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask[:], Xor: make([]byte, 4)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: subnet.Addr().AsSlice()},
				&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(bridge)},
				&expr.Counter{},
				&expr.Masq{},
			},
		})
	}
	return rules
}

// ensureRules replaces the tenant's rules with the ones it needs now, in one
// nftables transaction.
func ensureRules(tenant, bridge string, subnet netip.Prefix, nat bool) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(table())
	fwd, post := chains(t)
	c.AddChain(fwd)
	c.AddChain(post)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: make table %s: %w", tableName, err)
	}
	if err := delTenantRules(c, tenant); err != nil {
		return err
	}
	for _, r := range tenantRules(fwd, post, tenant, bridge, subnet, nat) {
		c.AddRule(r)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: add rules of tenant %s: %w", tenant, err)
	}
	return nil
}

// deleteRules removes the tenant's rules, and the table once no rule is
// left in it.
func deleteRules(tenant string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if _, err := c.ListTableOfFamily(tableName, nftables.TableFamilyINet); err != nil {
		return nil // no table, no rules
	}
	if err := delTenantRules(c, tenant); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete rules of tenant %s: %w", tenant, err)
	}
	left, err := listTenantRules(c, "")
	if err != nil {
		return err
	}
	if len(left) == 0 {
		c.DelTable(table())
		if err := c.Flush(); err != nil {
			return fmt.Errorf("nftables: delete table %s: %w", tableName, err)
		}
	}
	return nil
}

// delTenantRules queues the deletion of the tenant's rules on c.
func delTenantRules(c *nftables.Conn, tenant string) error {
	rules, err := listTenantRules(c, tenant)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if err := c.DelRule(r); err != nil {
			return fmt.Errorf("nftables: delete rule of tenant %s: %w", tenant, err)
		}
	}
	return nil
}

// listTenantRules lists the rules of the plugin's table that belong to tenant,
// or every rule in it for tenant "". Tests read the drop counters from them.
func listTenantRules(c *nftables.Conn, tenant string) ([]*nftables.Rule, error) {
	t := table()
	if _, err := c.ListTableOfFamily(tableName, nftables.TableFamilyINet); err != nil {
		return nil, nil
	}
	fwd, post := chains(t)
	var out []*nftables.Rule
	for _, ch := range []*nftables.Chain{fwd, post} {
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return nil, fmt.Errorf("nftables: list chain %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			if tenant == "" || comment == ruleTag+tenant {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// An overlay's rules (comment "fluxvm overlay=<network>") keep its tunnel to
// its own network: in the forward chain, what comes in on the tunnel goes
// out on the network's bridge only, and only the network's bridge sends into
// the tunnel (so another tenant's VM cannot route through it); in the
// postrouting chain, before every masquerade, what leaves through the tunnel
// is accepted as it is, so the peers see the guests' own addresses.
func overlayRules(fwd, post *nftables.Chain, netw, bridge, dev string) (forward []*nftables.Rule, nat *nftables.Rule) {
	tag := userdata.AppendString(nil, userdata.TypeComment, overlayTag+netw)
	drop := func(in bool) *nftables.Rule {
		k1, k2 := expr.MetaKeyIIFNAME, expr.MetaKeyOIFNAME
		if !in {
			k1, k2 = k2, k1
		}
		return &nftables.Rule{Table: fwd.Table, Chain: fwd, UserData: tag, Exprs: []expr.Any{
			&expr.Meta{Key: k1, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(dev)},
			&expr.Meta{Key: k2, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(bridge)},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}}
	}
	nat = &nftables.Rule{Table: post.Table, Chain: post, UserData: tag, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(dev)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}}
	return []*nftables.Rule{drop(true), drop(false)}, nat
}

// ensureOverlayRules replaces the overlay's rules, in one transaction.
func ensureOverlayRules(netw, bridge, dev string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(table())
	fwd, post := chains(t)
	c.AddChain(fwd)
	c.AddChain(post)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: make table %s: %w", tableName, err)
	}
	if err := delTaggedRules(c, overlayTag+netw); err != nil {
		return err
	}
	forward, nat := overlayRules(fwd, post, netw, bridge, dev)
	for _, r := range forward {
		c.InsertRule(r) // before the isolation rules: these are narrower
	}
	c.InsertRule(nat) // before every masquerade
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: add overlay rules of network %s: %w", netw, err)
	}
	return nil
}

// deleteOverlayRules removes the overlay's rules (the table stays while the
// network's own rules hold it).
func deleteOverlayRules(netw string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if _, err := c.ListTableOfFamily(tableName, nftables.TableFamilyINet); err != nil {
		return nil
	}
	if err := delTaggedRules(c, overlayTag+netw); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete overlay rules of network %s: %w", netw, err)
	}
	return nil
}

// delTaggedRules queues the deletion of the rules whose comment is tag.
func delTaggedRules(c *nftables.Conn, tag string) error {
	t := table()
	fwd, post := chains(t)
	for _, ch := range []*nftables.Chain{fwd, post} {
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return fmt.Errorf("nftables: list chain %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			if comment, _ := userdata.GetString(r.UserData, userdata.TypeComment); comment == tag {
				if err := c.DelRule(r); err != nil {
					return fmt.Errorf("nftables: delete rule %q: %w", tag, err)
				}
			}
		}
	}
	return nil
}

// A network's egress rules (comment "fluxvm egress=<network>") hold what
// leaves it for anywhere but a tenant network or an overlay (so the
// isolation and overlay rules keep their say there): blocked subnets are
// dropped; under an allowlist, allowed subnets are accepted and the rest is
// dropped. Every drop counts.
func egressRules(fwd *nftables.Chain, netw, bridge string, mode string, allow, block []netip.Prefix) []*nftables.Rule {
	tag := userdata.AppendString(nil, userdata.TypeComment, egressTag+netw)
	match := func(dst *netip.Prefix) []expr.Any {
		e := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(bridge)},
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(bridgePrefix)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(wgPrefix)},
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		}
		if dst != nil {
			mask := netip.MustParsePrefix(fmt.Sprintf("255.255.255.255/%d", dst.Bits())).Masked().Addr().As4()
			e = append(e,
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask[:], Xor: make([]byte, 4)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dst.Addr().AsSlice()},
			)
		}
		return e
	}
	rule := func(dst *netip.Prefix, v expr.VerdictKind) *nftables.Rule {
		return &nftables.Rule{Table: fwd.Table, Chain: fwd, UserData: tag, Exprs: append(match(dst), &expr.Counter{}, &expr.Verdict{Kind: v})}
	}
	var rules []*nftables.Rule
	for _, b := range block {
		rules = append(rules, rule(&b, expr.VerdictDrop))
	}
	if mode == "allowlist" {
		for _, a := range allow {
			rules = append(rules, rule(&a, expr.VerdictAccept))
		}
		rules = append(rules, rule(nil, expr.VerdictDrop))
	}
	return rules
}

// ensureEgressRules replaces the network's egress rules, in one transaction.
func ensureEgressRules(netw, bridge, mode string, allow, block []netip.Prefix) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(table())
	fwd, post := chains(t)
	c.AddChain(fwd)
	c.AddChain(post)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: make table %s: %w", tableName, err)
	}
	if err := delTaggedRules(c, egressTag+netw); err != nil {
		return err
	}
	for _, r := range egressRules(fwd, netw, bridge, mode, allow, block) {
		c.AddRule(r)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: egress rules of network %s: %w", netw, err)
	}
	return nil
}

// deleteEgressRules removes the network's egress rules.
func deleteEgressRules(netw string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if _, err := c.ListTableOfFamily(tableName, nftables.TableFamilyINet); err != nil {
		return nil
	}
	if err := delTaggedRules(c, egressTag+netw); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete egress rules of network %s: %w", netw, err)
	}
	return nil
}
