package dataplane

import (
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// StaleFlows is the connection-tracking cleanup a change owes in the table
// of one IP family: the UDP and SCTP flows left pointing at what no longer
// serves them, which conntrack would otherwise keep sending there. The
// proxykit package accumulates it across syncs and hands it to a conntrack
// cleaner (dataplane/conntrack) once the dataplanes programmed State.
type StaleFlows struct {
	// Family is the table to clean; "" means IPv4. Items of the other
	// family are skipped.
	Family v1.IPFamily
	// Frontends are service addresses no flow may keep using (a deleted
	// service, a removed port, a changed cluster IP, external IP or VIP):
	// every flow sent to one goes, DNATed or not. A frontend whose IP is
	// invalid is a node port: every DNATed flow sent to that port on any
	// local address goes. Unlike upstream, frontends of deleted services
	// are included.
	Frontends []servicemodel.Frontend
	// Endpoints are endpoints that stopped serving a port (a service
	// scaled to zero included) and do not serve it again in State: DNATed
	// flows whose replies come from one go. With State, only those sent to
	// a frontend of that port in State, so that an endpoint still serving
	// another service keeps that service's flows; an endpoint whose port is
	// not in State is left to the port's frontends, which are stale with
	// it.
	Endpoints []endpoints.StaleEndpoint
	// Ports are service ports whose endpoints changed, or that appeared or
	// changed themselves; they need State. A flow sent to one of the
	// port's frontends in State (cluster IP, external IPs, VIPs, node port)
	// whose replies do not come from an endpoint serving the port in State
	// goes: this is kube-proxy's reconciliation, and it also flushes the
	// flows that bypassed DNAT because the port had no endpoints, or did
	// not exist, when they began. Node ports are
	// reconciled by port alone, as kube-proxy does, and only while the
	// port has a serving endpoint; un-NATed flows to them go too, so that a
	// client that sent to the node port before the service existed reaches
	// it without changing its source port.
	Ports []servicemodel.PortName
	// State is what every dataplane of Family programs now; nil leaves
	// Endpoints un-narrowed and Ports skipped.
	State *State
}

// Empty reports whether there is nothing to clean.
func (s StaleFlows) Empty() bool {
	return len(s.Frontends) == 0 && len(s.Endpoints) == 0 && len(s.Ports) == 0
}
