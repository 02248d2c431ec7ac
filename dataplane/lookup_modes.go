package dataplane

import (
	"fmt"
	"net/netip"
)

// Mode is a kube-proxy proxy mode (its --proxy-mode), whose semantics
// LookupMode follows.
type Mode string

// The modes of the dataplanes this library ships; see the package
// documentation for where each differs from iptables mode.
const (
	ModeIPTables  Mode = "iptables"
	ModeNFTables  Mode = "nftables"
	ModeIPVS      Mode = "ipvs"
	ModeUserspace Mode = "userspace"
)

// modeName names the semantics t follows; an unknown mode is iptables'.
func (t *trace) modeName() Mode {
	switch t.mode {
	case ModeNFTables, ModeIPVS, ModeUserspace:
		return t.mode
	}
	return ModeIPTables
}

// filtersNodePortsEverywhere: iptables mode's filter rules reject and drop
// node port traffic on every local address ("--dst-type LOCAL"), whatever
// nodePortAddresses says, and the userspace mode writes the same; nftables
// and IPVS modes only where node ports are served.
func (t *trace) filtersNodePortsEverywhere() bool {
	return t.mode != ModeNFTables && t.mode != ModeIPVS
}

// acceptsHealthChecks: nftables mode writes no accept rule for health-check
// node ports, and the userspace mode has no firewall to open.
func (t *trace) acceptsHealthChecks() bool {
	return t.mode != ModeNFTables && t.mode != ModeUserspace
}

// ipvsBound reports whether IPVS mode holds ip as a local address: every
// service address is bound to its dummy link.
func (t *trace) ipvsBound(ip netip.Addr) bool {
	if t.mode != ModeIPVS {
		return false
	}
	_, ok := t.idx.addrs[ip]
	return ok
}

// refusedByNode is IPVS mode's verdict for a packet to a service address
// that no rule took: the address is the node's, whose stack refuses the
// port.
func (t *trace) refusedByNode() (Verdict, bool) {
	if t.mode != ModeIPVS {
		return Verdict{}, false
	}
	dst := t.p.Dst
	sp, ok := t.idx.addrs[dst.Addr()]
	if !ok {
		return Verdict{}, false
	}
	return Verdict{Action: Reject,
		Reason: fmt.Sprintf("%s is an address of %s, which IPVS mode binds to the node: the node refuses port %d/%s",
			dst.Addr(), serviceOf(sp), dst.Port(), t.p.Protocol)}, true
}

// ipvsInternalLocal: in IPVS mode, internal traffic (from the node or a
// local pod) to an external destination of a service whose traffic
// policies are both Local is DNATed to the cluster IP first, whose virtual
// server holds only the local endpoints.
func (t *trace) ipvsInternalLocal(v *portView) bool {
	return t.mode == ModeIPVS && v.pol.ExternalLocal && v.pol.InternalLocal && (t.detector && t.fromPod || t.srcLocal)
}

// ipvsToClusterIP is the verdict for traffic ipvsInternalLocal holds:
// the cluster IP's local endpoints, masqueraded when the node sent it, or
// without any a drop (a reject for the node's own packets, see
// noEndpoints).
func (t *trace) ipvsToClusterIP(v *portView, via string) (Verdict, bool) {
	eps := v.internalEndpoints()
	if len(eps) == 0 {
		return t.noEndpoints(v, via+" (IPVS mode sends internal traffic to the cluster IP)", true, "internalTrafficPolicy"), true
	}
	why := "IPVS mode sends internal traffic to the cluster IP: internalTrafficPolicy Local, local endpoints"
	if t.srcLocal {
		why = "masqueraded: traffic from the node; " + why
	}
	return t.dnat(v, eps, t.srcLocal, via, why)
}
