package ipvs

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/dataplane/xtables"
)

// rulesText is the iptables-restore input of the dataplane's chains for
// s, the INTERNAL chain declared but without its rules (withInternal adds
// them). Every other per-service fact is in the ipsets, so these rules
// change only with the settings.
func (d *Dataplane) rulesText(s *dataplane.State) string {
	n, set := &d.names, d.names.set
	mark := fmt.Sprintf("%#x", uint32(1)<<d.cfg.MasqueradeBit)
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	match := func(id setID, flags string) string { return "-m set --match-set " + set[id] + " " + flags }

	line("*nat")
	for _, c := range []string{n.services, n.markMasq, n.postrouting, n.internal} {
		line(":%s - [0:0]", c)
	}
	if cluster, ok := d.clusterMasquerade(s); ok {
		line("-A %s %s%s -j %s", n.services, match(setClusterIP, "dst,dst"), cluster, n.markMasq)
	} else {
		// The node reaching a cluster IP picks that bound address as its
		// source; its endpoint could not answer it.
		line("-A %s %s -j %s", n.services, match(setClusterIP, "src,dst"), n.markMasq)
	}
	line("-A %s %s -j %s", n.services, match(setExternal, "dst,dst"), n.markMasq)
	line("-A %s %s -j %s", n.services, match(setNodePort, "dst,dst"), n.markMasq)
	line("-A %s %s -m addrtype --src-type LOCAL -j %s", n.services, match(setExternalLocal, "dst,dst"), n.markMasq)
	line("-A %s %s -m addrtype --src-type LOCAL -j %s", n.services, match(setNodePortLocal, "dst,dst"), n.markMasq)
	// Internal traffic to externalTrafficPolicy Local destinations: the
	// node's, and the local pods' as the detector tells them.
	for _, id := range []setID{setExternalLocal, setNodePortLocal} {
		line("-A %s %s -m addrtype --src-type LOCAL -j %s", n.services, match(id, "dst,dst"), n.internal)
		if pod, ok := podMatch(s); ok {
			line("-A %s %s%s -j %s", n.services, match(id, "dst,dst"), pod, n.internal)
		}
	}
	line("-A %s -j MARK --or-mark %s", n.markMasq, mark)
	line("-A %s %s -j MASQUERADE", n.postrouting, match(setLoopBack, "dst,dst,src"))
	line("-A %s -m mark ! --mark %s/%s -j RETURN", n.postrouting, mark, mark)
	line("-A %s -j MARK --xor-mark %s", n.postrouting, mark)
	line("-A %s -j MASQUERADE --random-fully", n.postrouting)
	line("COMMIT")

	line("*filter")
	for _, c := range []string{n.filter, n.sourceRanges, n.forward} {
		line(":%s - [0:0]", c)
	}
	line("-A %s %s -j DROP", n.filter, match(setDrop, "dst,dst"))
	line("-A %s %s -j %s", n.filter, match(setFirewall, "dst,dst"), n.sourceRanges)
	line("-A %s %s -j ACCEPT", n.filter, match(setHealthCheck, "dst,dst"))
	line("-A %s %s -j RETURN", n.sourceRanges, match(setSourceCIDR, "dst,dst,src"))
	line("-A %s %s -j RETURN", n.sourceRanges, match(setSourceIP, "dst,dst,src"))
	line("-A %s -j DROP", n.sourceRanges)
	line("-A %s -m mark --mark %s/%s -j ACCEPT", n.forward, mark, mark)
	line("-A %s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", n.forward)
	line("COMMIT")
	return b.String()
}

// rulesKey is what of a State's settings the rules follow: rulesText is
// the same for two States with the same key.
type rulesKey struct {
	masqueradeAll bool
	// pod is podMatch's match, "" without one.
	pod string
}

func rulesKeyOf(s *dataplane.State) rulesKey {
	pod, _ := podMatch(s)
	return rulesKey{s.Settings.MasqueradeAll, pod}
}

// internalText is the INTERNAL chain's rules, sorted.
func internalText(internal map[string]int) string {
	return strings.Join(slices.Sorted(maps.Keys(internal)), "")
}

// clusterMasquerade returns the match that makes traffic to a cluster IP
// masqueraded (after the set match), and false when none is.
func (d *Dataplane) clusterMasquerade(s *dataplane.State) (string, bool) {
	if s.Settings.MasqueradeAll {
		return "", true
	}
	if pod, ok := podMatch(s); ok {
		return " !" + pod, true
	}
	return "", false
}

// podMatch returns the match of the local-traffic detector (" -s CIDR",
// " -i IFACE"), and false when there is none.
func podMatch(s *dataplane.State) (string, bool) {
	det := s.Settings.LocalDetector
	switch det.Mode {
	case dataplane.LocalModeClusterCIDR, dataplane.LocalModeNodeCIDR:
		if cidr, ok := s.DetectionCIDR(); ok {
			return " -s " + cidr.String(), true
		}
	case dataplane.LocalModeBridgeInterface, dataplane.LocalModeInterfaceNamePrefix:
		// A name no rule may hold never gets here (Sync's CheckState).
		if name, ok := backend.LocalInterface(det, "+"); ok {
			return " -i " + name, true
		}
	}
	return "", false
}

// owned are the dataplane's iptables chains and the jumps that hook them
// in.
func (d *Dataplane) owned() *xtables.OwnedChains {
	n := &d.names
	j := func(table, chain, target string) xtables.Jump {
		return xtables.Jump{Table: table, Chain: chain, Rule: []string{
			"-m", "comment", "--comment", "proxykit ipvs", "-j", target}}
	}
	return &xtables.OwnedChains{
		Chains: []xtables.Chain{
			{Table: "nat", Name: n.services}, {Table: "nat", Name: n.markMasq}, {Table: "nat", Name: n.postrouting}, {Table: "nat", Name: n.internal},
			{Table: "filter", Name: n.filter}, {Table: "filter", Name: n.sourceRanges}, {Table: "filter", Name: n.forward},
		},
		Jumps: []xtables.Jump{
			j("nat", "PREROUTING", n.services), j("nat", "OUTPUT", n.services),
			j("nat", "POSTROUTING", n.postrouting),
			j("filter", "INPUT", n.filter), j("filter", "FORWARD", n.forward),
		},
		Logger: d.log,
	}
}

// withInternal is the restore input of static (rulesText) with internal
// as the INTERNAL chain's rules, in the nat table static writes first.
func withInternal(static, internal string) string {
	nat, rest, _ := strings.Cut(static, "COMMIT\n")
	return nat + internal + "COMMIT\n" + rest
}

// syncRules writes the chains, with internal as the INTERNAL chain's
// rules, when they differ from what s needs or from their listing after
// the last write, and hooks them in: one listing, and one restore when
// anything is missing. It returns the bytes written and what it repaired.
func (d *Dataplane) syncRules(ctx context.Context, s *dataplane.State, internal string) (int, []string, error) {
	static := d.rulesText(s)
	owned := d.owned()
	listed, err := owned.List(ctx, d.runner)
	if err != nil {
		return 0, nil, err
	}
	same := static == d.rules && internal == d.internalText && d.listed != nil
	var changes []string
	rewrite := !same
	if same {
		changes = owned.Changed(d.listed, listed)
		rewrite = len(changes) > 0
	} else {
		changes = append(changes, "iptables chains written")
	}
	changes = append(changes, owned.MissingJumps(listed)...)
	hook := owned.HookInput(listed)
	n := 0
	switch {
	case rewrite:
		text := withInternal(static, internal)
		if err := d.runner.Restore(ctx, xtables.RestoreBytes(text+hook)); err != nil {
			return 0, nil, fmt.Errorf("write iptables rules: %w", err)
		}
		n = len(text)
		if same {
			// The input of the last write, which listed as d.listed.
			listed = d.listed
		} else if listed, err = owned.List(ctx, d.runner); err != nil {
			return 0, nil, err
		}
	case hook != "":
		if err := d.runner.Restore(ctx, xtables.RestoreBytes(hook)); err != nil {
			return 0, nil, fmt.Errorf("hook iptables rules: %w", err)
		}
	}
	d.rules, d.internalText, d.listed = static, internal, listed
	return n, changes, nil
}

// syncInternal rewrites the INTERNAL chain alone when its rules changed,
// as a partial sync needs: one restore and one listing of that chain. It
// returns the bytes written.
func (d *Dataplane) syncInternal(ctx context.Context) (int, error) {
	internal := internalText(d.internal)
	if internal == d.internalText {
		return 0, nil
	}
	text := "*nat\n:" + d.names.internal + " - [0:0]\n" + internal + "COMMIT\n"
	if err := d.runner.Restore(ctx, xtables.RestoreBytes(text)); err != nil {
		return 0, fmt.Errorf("write iptables chain %s: %w", d.names.internal, err)
	}
	rules, _, err := d.runner.ListChain(ctx, "nat", d.names.internal)
	if err != nil {
		return 0, fmt.Errorf("list iptables rules: %w", err)
	}
	d.internalText = internal
	d.listed[xtables.Chain{Table: "nat", Name: d.names.internal}] = rules
	return len(text), nil
}
