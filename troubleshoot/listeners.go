package troubleshoot

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
)

// ListenerLister is a dataplane that serves its frontends in-process,
// such as the userspace dataplane's forwarders: its reading is the
// frontends it listens for, not rules to trace.
type ListenerLister interface {
	// ListeningFrontends returns each frontend listened for (a node
	// port's with no IP) with its kind, for people: "cluster IP".
	ListeningFrontends() map[servicemodel.Frontend]string
}

// VerifyListeners is Verify for a dataplane that serves its frontends
// in-process (the userspace dataplane's forwarders): every frontend of a
// service port with an endpoint must have a listener (Missing), and no
// listener may serve a frontend the model lacks or that has no endpoint
// (Extra).
func VerifyListeners(s *dataplane.State, l ListenerLister) []Mismatch {
	want := map[servicemodel.Frontend]servicemodel.PortName{}
	var order []servicemodel.Frontend
	for sp := range s.Services.All() {
		if !s.Select(sp).HasAny {
			continue
		}
		addrs := append([]netip.Addr{sp.ClusterIP}, sp.ExternalIPs...)
		addrs = append(addrs, sp.LoadBalancerVIPs...)
		var fes []servicemodel.Frontend
		for _, a := range addrs {
			fes = append(fes, servicemodel.Frontend{IP: a, Port: sp.Port, Protocol: sp.Protocol})
		}
		if sp.NodePort != 0 {
			fes = append(fes, servicemodel.Frontend{Port: sp.NodePort, Protocol: sp.Protocol})
		}
		for _, fe := range fes {
			// The first claim in the model's order wins, as in Lookup.
			if old, ok := want[fe]; !ok || sp.Name.Compare(old) < 0 {
				if !ok {
					order = append(order, fe)
				}
				want[fe] = sp.Name
			}
		}
	}
	var out []Mismatch
	listening := l.ListeningFrontends()
	for fe, kind := range listening {
		if _, ok := want[fe]; !ok {
			at := frontendString(fe, s.Family)
			out = append(out, Mismatch{Kind: Extra, Frontend: at,
				Detail: fmt.Sprintf("a forwarder listens for %s (%s), the model has no endpoint there", at, kind)})
		}
	}
	for _, fe := range order {
		if _, ok := listening[fe]; !ok {
			out = append(out, Mismatch{Service: want[fe], Kind: Missing, Frontend: frontendString(fe, s.Family),
				Detail: "no forwarder listens for it; the model has endpoints"})
		}
	}
	slices.SortFunc(out, func(a, b Mismatch) int {
		return cmp.Or(a.Service.Compare(b.Service), cmp.Compare(a.Frontend, b.Frontend))
	})
	return out
}
