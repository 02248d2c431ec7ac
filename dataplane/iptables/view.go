package iptables

import (
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/internal/ruleport"
)

// view is everything about the State other than its services that the
// rules depend on. Two syncs with equal views may reuse each other's
// per-service rules; any difference forces a full sync.
type view struct {
	ipv6 bool
	// ifLocal and ifNotLocal are the local-traffic matches; both empty
	// when there is no usable detector.
	ifLocal, ifNotLocal string
	masqueradeAll       bool
	// nodeIPs are the node's usable addresses; they decide whether a
	// source range lets the node itself reach a LoadBalancer IP.
	nodeIPs []netip.Addr
	// nodePortDsts are the destination matches of the jumps to the
	// node-port chain, in order.
	nodePortDsts []string
	// localhostNodePorts is whether 127.0.0.0/8 serves node ports, which
	// needs route_localnet and the martian-blocking rule.
	localhostNodePorts bool
	// noComments is large-cluster mode.
	noComments bool
	// accounting is whether the nfacct counters exist, so that the
	// counting rules may match them (see Config.Accounting).
	accounting bool
	// ignored says why settings were left out. It follows from the
	// compared fields' inputs, so it is reported only when the view
	// changes (a full sync), not on every sync.
	ignored []string
}

func (v *view) equal(o *view) bool {
	return v.ipv6 == o.ipv6 && v.ifLocal == o.ifLocal && v.ifNotLocal == o.ifNotLocal &&
		v.masqueradeAll == o.masqueradeAll && slices.Equal(v.nodeIPs, o.nodeIPs) &&
		slices.Equal(v.nodePortDsts, o.nodePortDsts) && v.localhostNodePorts == o.localhostNodePorts &&
		v.noComments == o.noComments && v.accounting == o.accounting
}

// countsLocalhost is whether node-port packets to 127.0.0.0/8 are counted.
func (v *view) countsLocalhost() bool { return v.localhostNodePorts && v.accounting }

// newView derives the view of s.
func newView(s *dataplane.State, ipv6 bool) *view {
	v := &view{ipv6: ipv6, masqueradeAll: s.Settings.MasqueradeAll}
	skip := func(reason string) { v.ignored = append(v.ignored, reason) }
	for _, a := range s.Node.IPs {
		if ruleport.OfFamily(a, ipv6) {
			v.nodeIPs = append(v.nodeIPs, a)
		}
	}
	slices.SortFunc(v.nodeIPs, netip.Addr.Compare)
	v.nodeIPs = slices.Compact(v.nodeIPs)

	ld := s.Settings.LocalDetector
	cidrMatch := func() {
		if c, ok := s.DetectionCIDR(); ok {
			v.ifLocal, v.ifNotLocal = "-s "+c.String(), "! -s "+c.String()
		} else {
			skip("local traffic detector has no CIDR of this family")
		}
	}
	switch ld.Mode {
	case dataplane.LocalModeNone:
	case dataplane.LocalModeClusterCIDR, dataplane.LocalModeNodeCIDR:
		cidrMatch()
	case dataplane.LocalModeBridgeInterface, dataplane.LocalModeInterfaceNamePrefix:
		// A name no rule may hold never gets here (checkState).
		if ifc, ok := backend.LocalInterface(ld, "+"); ok {
			v.ifLocal, v.ifNotLocal = "-i "+ifc, "! -i "+ifc
		}
	}

	matchAll, loopback := true, false
	var npa []netip.Prefix
	for _, p := range s.Settings.NodePortAddresses {
		if !p.IsValid() || p.Addr().Is6() != ipv6 || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			continue
		}
		npa = append(npa, p.Masked())
	}
	if len(npa) > 0 {
		matchAll = slices.ContainsFunc(npa, func(p netip.Prefix) bool { return p.Bits() == 0 })
	}
	if !ipv6 {
		loopback = matchAll || slices.ContainsFunc(npa, func(p netip.Prefix) bool {
			return p.Contains(netip.AddrFrom4([4]byte{127, 0, 0, 0})) || p.Addr().IsLoopback()
		})
	}
	v.localhostNodePorts = !ipv6 && s.Settings.LocalhostNodePorts && loopback
	if matchAll {
		d := "-m addrtype --dst-type LOCAL"
		if ipv6 {
			d += " ! -d ::1/128"
		} else if !v.localhostNodePorts {
			d += " ! -d 127.0.0.0/8"
		}
		v.nodePortDsts = []string{d}
	} else {
		var ips []netip.Addr
		for _, a := range v.nodeIPs {
			if slices.ContainsFunc(npa, func(p netip.Prefix) bool { return p.Contains(a) }) {
				ips = append(ips, a)
			}
		}
		// The node's loopback address lives on lo, which State.Node does
		// not list; upstream finds it among the interface addresses.
		lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
		if v.localhostNodePorts && !slices.Contains(ips, lo) && slices.ContainsFunc(npa, func(p netip.Prefix) bool { return p.Contains(lo) }) {
			ips = append(ips, lo)
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		for _, a := range ips {
			if a.IsLoopback() && !v.localhostNodePorts {
				skip("node port address on loopback without localhost node ports")
				continue
			}
			v.nodePortDsts = append(v.nodePortDsts, "-d "+a.String())
		}
	}
	return v
}
