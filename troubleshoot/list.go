package troubleshoot

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
)

// The frontend types List reports and filters on.
const (
	TypeClusterIP    = "ClusterIP"
	TypeExternalIP   = "ExternalIP"
	TypeLoadBalancer = "LoadBalancer"
	TypeNodePort     = "NodePort"
)

// Filter selects List's rows; each empty field selects everything.
type Filter struct {
	Namespace string
	Name      string
	// Type is a frontend type (TypeClusterIP, ...), compared without case.
	Type string
}

// Row is one frontend of one service port.
type Row struct {
	// Frontend is "ip:port/PROTO", or ":nodePort/PROTO" for a node port,
	// which every node address serves.
	Frontend string `json:"frontend"`
	Type     string `json:"type"`
	// Service is "ns/name:port/PROTO".
	Service  string    `json:"service"`
	Backends []Backend `json:"backends"`
}

// Backend is one endpoint of a frontend.
type Backend struct {
	Address string `json:"address"`
	// State is EndpointState's.
	State string `json:"state"`
	Local bool   `json:"local,omitempty"`
	// Selected reports that the endpoint takes some of this node's traffic
	// to the frontend (State.Select), which readiness, the terminating
	// fallback, traffic policy and topology decide.
	Selected bool `json:"selected"`
}

// EndpointState is an endpoint's conditions in a word or two: "ready",
// "terminating" (and still serving), "terminating, not serving", "not
// ready".
func EndpointState(e *endpoints.Endpoint) string {
	switch {
	case e.Ready:
		return "ready"
	case e.Terminating && e.Serving:
		return "terminating"
	case e.Terminating:
		return "terminating, not serving"
	}
	return "not ready"
}

// List returns one row per frontend of every service port of states that
// f selects, sorted by service, then type and frontend.
func List(states []*dataplane.State, f Filter) []Row {
	var rows []Row
	for _, s := range states {
		for sp := range s.Services.All() {
			if f.Namespace != "" && sp.Name.Namespace != f.Namespace || f.Name != "" && sp.Name.Name != f.Name {
				continue
			}
			backends := backendsOf(s, sp)
			add := func(typ, frontend string) {
				if f.Type == "" || strings.EqualFold(f.Type, typ) {
					rows = append(rows, Row{Frontend: frontend, Type: typ, Service: ServiceString(sp.Name), Backends: backends})
				}
			}
			at := func(a netip.Addr) string { return netip.AddrPortFrom(a, sp.Port).String() + "/" + string(sp.Protocol) }
			add(TypeClusterIP, at(sp.ClusterIP))
			for _, a := range sp.ExternalIPs {
				add(TypeExternalIP, at(a))
			}
			for _, a := range sp.LoadBalancerVIPs {
				add(TypeLoadBalancer, at(a))
			}
			if sp.NodePort != 0 {
				add(TypeNodePort, fmt.Sprintf(":%d/%s", sp.NodePort, sp.Protocol))
			}
		}
	}
	slices.SortStableFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Type, b.Type), cmp.Compare(a.Frontend, b.Frontend))
	})
	return rows
}

func backendsOf(s *dataplane.State, sp *servicemodel.ServicePort) []Backend {
	sel := s.Select(sp)
	var out []Backend
	for _, e := range s.Endpoints.Get(sp.Name) {
		out = append(out, Backend{Address: e.String(), State: EndpointState(e), Local: e.Local,
			Selected: slices.Contains(sel.AllReachable, e)})
	}
	return out
}

// WriteList prints rows as a table, one line per frontend; a backend is
// marked "local" when on this node and "unused" when no traffic of this
// node reaches it.
func WriteList(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FRONTEND\tTYPE\tSERVICE\tBACKENDS")
	for _, r := range rows {
		var bs []string
		for _, b := range r.Backends {
			var tags []string
			if b.State != "ready" {
				tags = append(tags, b.State)
			}
			if b.Local {
				tags = append(tags, "local")
			}
			if !b.Selected {
				tags = append(tags, "unused")
			}
			s := b.Address
			if len(tags) > 0 {
				s += " (" + strings.Join(tags, ", ") + ")"
			}
			bs = append(bs, s)
		}
		backends := strings.Join(bs, ", ")
		if backends == "" {
			backends = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Frontend, r.Type, r.Service, backends)
	}
	return tw.Flush()
}
