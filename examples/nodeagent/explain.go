package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
)

// explain answers, from the model the rules are built from, what happens
// to one packet.
func explain(ctx context.Context, o *options, h host, log logr.Logger, src *input, stdout, stderr io.Writer) int {
	family := v1.IPv4Protocol
	if !o.explain.dst.Addr().Is4() {
		family = v1.IPv6Protocol
	}
	states, err := o.modelStates(ctx, log, src, family)
	if err != nil {
		fmt.Fprintf(stderr, "nodeagent: explain: %v\n", err)
		return exitFailure
	}
	st := states[0]
	origin, inferred := o.explain.origin(st)
	p := dataplane.Packet{Src: o.explain.src, Dst: o.explain.dst, Protocol: o.explain.protocol, From: origin}
	model := st.LookupMode(dataplane.Mode(o.proxyMode), p)
	writeVerdict(stdout, p, inferred, model)
	if o.tflags.kernel {
		return explainKernel(ctx, o, h, log, st, p, model, stdout, stderr)
	}
	return exitOK
}

// origin returns where the packet enters. Unless --from says, a source that
// is one of the node's addresses is the node, one in the node's pod CIDRs
// is a local pod, and anything else (pods of other nodes included) comes
// from outside.
func (e *explainArgs) origin(st *dataplane.State) (o dataplane.Origin, inferred bool) {
	switch e.from {
	case "pod":
		return dataplane.FromLocalPod, false
	case "node":
		return dataplane.FromNode, false
	case "outside":
		return dataplane.FromOutside, false
	}
	for _, ip := range st.Node.IPs {
		if ip == e.src {
			return dataplane.FromNode, true
		}
	}
	if e.src.IsLoopback() {
		return dataplane.FromNode, true
	}
	for _, c := range st.Node.PodCIDRs {
		if c.Contains(e.src) {
			return dataplane.FromLocalPod, true
		}
	}
	return dataplane.FromOutside, true
}

func originName(o dataplane.Origin) string {
	switch o {
	case dataplane.FromLocalPod:
		return "pod"
	case dataplane.FromNode:
		return "node"
	default:
		return "outside"
	}
}

func actionName(a dataplane.Action) string {
	switch a {
	case dataplane.Accept:
		return "accept"
	case dataplane.Reject:
		return "reject"
	case dataplane.Drop:
		return "drop"
	case dataplane.DNAT:
		return "DNAT"
	default:
		return "not a service"
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeVerdict(w io.Writer, p dataplane.Packet, inferred bool, v dataplane.Verdict) {
	from := originName(p.From)
	if inferred {
		from += " (inferred from the source; choose with --from)"
	}
	service := "-"
	// nftables rejects a cluster IP's unserved ports, which no service
	// port matched.
	if v.Action != dataplane.NotAService && v.Service.Name != "" {
		service = v.Service.String() + "/" + string(v.Service.Protocol)
	}
	eps := "-"
	if len(v.Endpoints) > 0 {
		list := make([]string, len(v.Endpoints))
		for i, e := range v.Endpoints {
			list[i] = e.String()
		}
		eps = fmt.Sprintf("%s (one is picked per connection)", strings.Join(list, ", "))
		if len(v.Endpoints) == 1 {
			eps = list[0]
		}
	}
	rows := [][2]string{
		{"packet", fmt.Sprintf("%s -> %s/%s", p.Src, p.Dst, p.Protocol)},
		{"from", from},
		{"action", actionName(v.Action)},
		{"service", service},
		{"endpoints", eps},
		{"masquerade", yesNo(v.Masquerade)},
		{"affinity", yesNo(v.Affinity)},
		{"reason", v.Reason},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-11s %s\n", r[0]+":", r[1])
	}
}
func parseExplain(operands []string, from string) (*explainArgs, error) {
	if len(operands) != 2 {
		return nil, usagef("explain needs SRC and DST:PORT/PROTO, e.g. explain 10.244.0.5 10.96.0.10:53/UDP")
	}
	e := &explainArgs{from: from}
	var err error
	if e.src, err = netip.ParseAddr(operands[0]); err != nil {
		return nil, usagef("explain: source %q is not an IP address", operands[0])
	}
	e.src = e.src.Unmap()
	dst, proto, hasProto := strings.Cut(operands[1], "/")
	e.protocol = v1.ProtocolTCP
	if hasProto {
		e.protocol = v1.Protocol(strings.ToUpper(proto))
	}
	if e.protocol != v1.ProtocolTCP && e.protocol != v1.ProtocolUDP && e.protocol != v1.ProtocolSCTP {
		return nil, usagef("explain: protocol %q is not TCP, UDP or SCTP", proto)
	}
	if e.dst, err = netip.ParseAddrPort(dst); err != nil || e.dst.Port() == 0 {
		return nil, usagef("explain: destination %q is not IP:PORT (bracket IPv6 addresses: [fd00::1]:80)", dst)
	}
	e.dst = netip.AddrPortFrom(e.dst.Addr().Unmap(), e.dst.Port())
	if e.src.Is4() != e.dst.Addr().Is4() {
		return nil, usagef("explain: source and destination are of different IP families")
	}
	switch from {
	case "", "pod", "node", "outside":
	default:
		return nil, usagef("explain: --from %q is not pod, node or outside", from)
	}
	return e, nil
}
