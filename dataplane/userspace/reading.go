package userspace

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// Reading is the dataplane's kernel in redirect mode (RedirectConfig) as
// troubleshooting reads it: its rules (mangle TPROXY and DROP for
// traffic entering the node, nat REDIRECT for the node's own, nat DNAT of
// the port alone for node ports, filter REJECT and the guard of the
// forwarders' own ports), read with everyone's as
// xtables.Reading reads them, and the forwarder each of them leads to. A
// forwarder routes its connections as the model does, so a packet sent to
// the forwarder of the service port the model names gets the model's
// verdict; one sent elsewhere, or to an address and port no socket
// listens on, gets its own: the kernel refuses a redirected or DNATed
// connection there and drops a TPROXY's packet.
type Reading struct {
	IPTables *xtables.Reading
	// Model is the State the forwarders route by.
	Model *dataplane.State
	// Listening reports whether a socket of the node listens at addr for
	// protocol, addr being where a rule leads: the unspecified address
	// (any of the node's) for a REDIRECT or a DNAT of the port alone, the
	// --on-ip for a TPROXY. A socket listens there if it is bound to that
	// address and port, or to the unspecified address on that port (a
	// dual-stack socket's "::" for IPv4 too); at the unspecified address,
	// any socket on the port does: so a cluster IP's missing socket is
	// not hidden by a LoadBalancer IP's on the same port
	// (ListeningSockets.Listening is one). A socket is taken to be
	// transparent (IP_TRANSPARENT, as the forwarders' are) for a TPROXY.
	// nil takes every redirect to reach its forwarder.
	Listening func(protocol v1.Protocol, addr netip.AddrPort) bool
}

// Trace is what the rules and the forwarders do with the first packet of
// a connection, in the shape State.Lookup answers; it never fails.
func (k *Reading) Trace(p dataplane.Packet) (dataplane.Verdict, error) {
	v, _, err := k.TraceSteps(p)
	return v, err
}

// TraceSteps is Trace with the rules the packet met, then the forwarder.
func (k *Reading) TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error) {
	v, steps, err := k.IPTables.TraceSteps(p)
	if err != nil || v.Action != dataplane.DNAT || len(v.Endpoints) != 1 {
		return v, steps, err
	}
	// A REDIRECT (or a DNAT of the port alone) leads to a socket of the
	// node, the unspecified address; a TPROXY to one at the address it
	// names, if any. Another DNAT leads to an endpoint.
	tproxy := tproxied(steps)
	if !tproxy && !v.Endpoints[0].Addr().IsUnspecified() {
		return v, steps, nil
	}
	to := v.Endpoints[0]
	if k.Listening != nil && !k.Listening(p.Protocol, to) {
		if tproxy {
			// TPROXY finds no socket to hand the packet to.
			steps = append(steps, fmt.Sprintf("no transparent socket of the node listens on %s %s: the kernel drops the packet", p.Protocol, socketAt(to)))
			return dataplane.Verdict{Action: dataplane.Drop, Service: v.Service}, steps, nil
		}
		steps = append(steps, fmt.Sprintf("no socket of the node listens on %s %s: the kernel refuses the connection", p.Protocol, socketAt(to)))
		return dataplane.Verdict{Action: dataplane.Reject, Service: v.Service}, steps, nil
	}
	if v.Service.Name == "" {
		// Another program's redirect.
		return v, steps, nil
	}
	model := k.Model.LookupMode(dataplane.ModeUserspace, p)
	if model.Service != v.Service {
		return v, steps, nil
	}
	steps = append(steps, fmt.Sprintf("forwarder of %s on %s: routes as the model does", v.Service.String()+"/"+string(v.Service.Protocol), socketAt(to)))
	return model, steps, nil
}

// socketAt names where a rule leads in a step: the port alone for the
// unspecified address, which stands for any of the node's.
func socketAt(addr netip.AddrPort) string {
	if addr.Addr().IsUnspecified() {
		return fmt.Sprintf("port %d", addr.Port())
	}
	return addr.String()
}

// tproxied reports whether a trace's steps met a TPROXY rule: the tracer
// follows one in mangle only, and nothing after it sends the packet
// elsewhere.
func tproxied(steps []string) bool {
	return slices.ContainsFunc(steps, func(s string) bool {
		return strings.HasPrefix(s, "mangle ") && strings.Contains(s, " -j TPROXY ")
	})
}

// Services lists the service ports the rules name.
func (k *Reading) Services() []servicemodel.PortName { return k.IPTables.Services() }

// ListeningFrontends returns each destination a forwarder listens for,
// as a frontend of the model (a node port's with no IP), with its kind as
// people read it ("cluster IP"): the in-process reading of the Dataplane
// that troubleshooting compares with the model (Listeners, without where
// each forwarder is bound).
func (d *Dataplane) ListeningFrontends() map[servicemodel.Frontend]string {
	listeners := d.Listeners()
	out := make(map[servicemodel.Frontend]string, len(listeners))
	for dst := range listeners {
		fe := servicemodel.Frontend{IP: dst.Addr.Addr(), Port: dst.Addr.Port(), Protocol: dst.Protocol}
		if fe.IP.IsUnspecified() {
			// A node port, served on every address.
			fe.IP = netip.Addr{}
		}
		out[fe] = dst.Kind.String()
	}
	return out
}
