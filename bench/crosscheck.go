package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// checkResult is the correctness cross-check of one workload: the same
// packets looked up in proxykit's State (the specification) and traced,
// with proxykit's tracer, through kube-proxy's rules and proxykit's.
type checkResult struct {
	Packets int
	// Disagreements counts the packets whose three verdicts are not
	// all equal; Examples describes the first few.
	Disagreements int
	Examples      []string
}

// maxCheckServices bounds the services whose packets are checked.
const maxCheckServices = 300

// crossCheck syncs the workload into kube-proxy's iptables proxier on
// upstream's fake iptables and into proxykit's iptables dataplane on its
// FakeRunner, reads both rulesets back, and compares the verdicts.
func crossCheck(w workload) (*checkResult, error) {
	c := newCluster(w)
	kube, err := newKubeIPTables(fake, v1.IPv4Protocol)
	if err != nil {
		return nil, err
	}
	pk, err := newProxykitIPTables(fake, v1.IPv4Protocol)
	if err != nil {
		return nil, err
	}
	for _, sys := range []system{kube, pk} {
		sys.updateNode(c.node)
		for i := range c.services {
			sys.updateService(nil, c.services[i])
			sys.updateSlice(nil, c.slices[i])
		}
		if err := sys.sync(); err != nil {
			return nil, err
		}
	}
	var rulesets []*xtables.Ruleset
	for k, d := range []interface{ dump() ([]byte, error) }{kube.backend().(*iptBackend), pk.backend().(*pkRunner)} {
		text, err := d.dump()
		if err != nil {
			return nil, err
		}
		rs := xtables.NewRuleset()
		if err := rs.Apply(text); err != nil {
			var line string
			if pe, ok := err.(*xtables.ParseError); ok {
				line = strings.Split(string(text), "\n")[pe.Line-1]
			}
			return nil, fmt.Errorf("reading %s's rules back: %w: %q", checked[k], err, line)
		}
		rulesets = append(rulesets, rs)
	}
	st := pk.(*proxykitSystem).b.Build().States[0]
	nodeIPs := []netip.Addr{netip.MustParseAddr(nodeIP)}
	res := &checkResult{}
	step := max(1, len(c.services)/maxCheckServices)
	for i := 0; i < len(c.services); i += step {
		for _, p := range packetsFor(c, i) {
			want := st.Lookup(p)
			res.Packets++
			var diffs []string
			for k, rs := range rulesets {
				if d := cmp.Diff(want, rs.Trace(p, nodeIPs), verdictOpts...); d != "" {
					diffs = append(diffs, fmt.Sprintf("%s: %s", checked[k], d))
				}
			}
			if len(diffs) > 0 {
				res.Disagreements++
				if len(res.Examples) < 5 {
					res.Examples = append(res.Examples, fmt.Sprintf("%s %s → %s from %s: %v", p.Protocol, p.Src, p.Dst, p.From, diffs))
				}
			}
		}
	}
	return res, nil
}

// checked names the rulesets of a cross-check.
var checked = []string{"kube-proxy", "proxykit"}

var verdictOpts = []cmp.Option{
	cmpopts.IgnoreFields(dataplane.Verdict{}, "Reason"), cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.AddrPort{}),
}

// packetsFor returns the packets checked for service i: its cluster IP
// from a pod, from the node, from outside and from one of its own
// endpoints (a hairpin), a port it does not serve, and its node port and
// load-balancer VIP where it has them, from inside and outside the source
// ranges.
func packetsFor(c *cluster, i int) []dataplane.Packet {
	svc, sl := c.services[i], c.slices[i]
	tcp := func(src string, from dataplane.Origin, dst string, port int32) dataplane.Packet {
		return dataplane.Packet{Src: netip.MustParseAddr(src), Dst: netip.AddrPortFrom(netip.MustParseAddr(dst), uint16(port)),
			Protocol: v1.ProtocolTCP, From: from}
	}
	cip, port := svc.Spec.ClusterIP, svc.Spec.Ports[0].Port
	ps := []dataplane.Packet{
		tcp("10.0.0.5", dataplane.FromLocalPod, cip, port),
		tcp(nodeIP, dataplane.FromNode, cip, port),
		tcp("203.0.113.7", dataplane.FromOutside, cip, port),
		tcp("10.0.0.5", dataplane.FromLocalPod, cip, port+1),
	}
	if len(sl.Endpoints) > 0 {
		ps = append(ps, tcp(sl.Endpoints[0].Addresses[0], dataplane.FromLocalPod, cip, port))
	}
	if np := svc.Spec.Ports[0].NodePort; np != 0 {
		ps = append(ps,
			tcp("203.0.113.7", dataplane.FromOutside, nodeIP, np),
			tcp("10.0.0.5", dataplane.FromLocalPod, nodeIP, np),
			tcp(nodeIP, dataplane.FromNode, nodeIP, np),
		)
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		ps = append(ps,
			tcp("203.0.113.7", dataplane.FromOutside, ing.IP, port),
			tcp("192.0.2.9", dataplane.FromOutside, ing.IP, port),
			tcp("10.0.0.5", dataplane.FromLocalPod, ing.IP, port),
		)
	}
	return ps
}
