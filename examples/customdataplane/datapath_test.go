package customdataplane_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/examples/customdataplane"
	v1 "k8s.io/api/core/v1"
)

// harness is the Dataplane plus a model of the datapath that reads its
// table: the part an eBPF or OVS vendor has in its BPF program or flows.
type harness struct {
	*customdataplane.Dataplane
}

// Trace fetches the table as the datapath's loader would and routes p
// through it.
func (h harness) Trace(_ context.Context, p dataplane.Packet) (dataplane.Verdict, error) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	var t customdataplane.Table
	if err := json.Unmarshal(rec.Body.Bytes(), &t); err != nil {
		return dataplane.Verdict{}, err
	}
	return route(&t, p), nil
}

func TestConformance(t *testing.T) {
	dataplanetest.Run(t, func(*testing.T) dataplanetest.Harness {
		return harness{customdataplane.New()}
	})
}

// route is the datapath: classify the packet, look its destination up,
// DNAT at the first entry that does, else reject or drop as an entry says.
func route(t *customdataplane.Table, p dataplane.Packet) dataplane.Verdict {
	dst := p.Dst.Addr()
	if t.Family == "" || dst.Is4() != (t.Family == v1.IPv4Protocol) {
		return dataplane.Verdict{Action: dataplane.NotAService}
	}
	toNode := dst.IsLoopback() || slices.Contains(t.NodeIPs, dst)
	fronts := t.Frontends[customdataplane.FrontendKey(p.Dst, p.Protocol)]
	nodePorts := t.NodePorts[customdataplane.NodePortKey(p.Dst.Port(), p.Protocol)]
	served := fronts
	if slices.ContainsFunc(t.NodePortAddrs, func(c netip.Prefix) bool { return c.Contains(dst) }) {
		served = append(slices.Clip(fronts), nodePorts...)
	}
	for _, e := range served {
		if a := pick(t, e, p); a.Verb == customdataplane.DNAT {
			return dnatVerdict(e, a, p.Src)
		}
	}
	if !toNode {
		nodePorts = nil // rejects and drops of node ports apply to the node's addresses
	}
	for _, e := range append(slices.Clip(fronts), nodePorts...) {
		switch pick(t, e, p).Verb {
		case customdataplane.Reject:
			return dataplane.Verdict{Action: dataplane.Reject, Service: e.Service}
		case customdataplane.Drop:
			return dataplane.Verdict{Action: dataplane.Drop, Service: e.Service}
		}
	}
	if hc := t.HealthChecks[p.Dst.Port()]; toNode && p.Protocol == v1.ProtocolTCP && len(hc) > 0 {
		return dataplane.Verdict{Action: dataplane.Accept, Service: hc[0]}
	}
	return dataplane.Verdict{Action: dataplane.NotAService}
}

// pick is the entry's action for p's class of client, after the
// load-balancer source ranges.
func pick(t *customdataplane.Table, e customdataplane.Entry, p dataplane.Packet) customdataplane.Action {
	a := e.Other
	switch {
	case fromPod(t.Pods, p):
		a = e.FromPod
	case p.From == dataplane.FromNode || p.Src.IsLoopback() || slices.Contains(t.NodeIPs, p.Src):
		a = e.FromNode
	}
	if len(e.Allowed) > 0 && a.Verb != customdataplane.Reject &&
		!slices.ContainsFunc(e.Allowed, func(c netip.Prefix) bool { return c.Contains(p.Src) }) {
		return customdataplane.Action{Verb: customdataplane.Drop}
	}
	return a
}

func fromPod(d customdataplane.Detector, p dataplane.Packet) bool {
	switch {
	case d.CIDR.IsValid():
		return d.CIDR.Contains(p.Src)
	case d.Interface == "" || p.From == dataplane.FromNode:
		return false
	case p.Interface == "":
		return p.From == dataplane.FromLocalPod
	case d.Prefix:
		return strings.HasPrefix(p.Interface, d.Interface)
	}
	return p.Interface == d.Interface
}

// dnatVerdict is what a DNAT does to a connection from src: a backend
// that is the source itself (a hairpin) is reached masqueraded.
func dnatVerdict(e customdataplane.Entry, a customdataplane.Action, src netip.Addr) dataplane.Verdict {
	v := dataplane.Verdict{Action: dataplane.DNAT, Service: e.Service, Endpoints: a.Backends, Affinity: e.Affinity}
	for _, b := range a.Backends {
		if b.Addr() == src {
			v.Hairpin = append(v.Hairpin, b)
		}
	}
	v.Masquerade = a.Masquerade || len(v.Hairpin) == len(a.Backends)
	return v
}
