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
	type key struct {
		addr  netip.AddrPort
		proto string
	}
	want := map[key]servicemodel.PortName{}
	var order []key
	unspec := unspecified(s.Family)
	for sp := range s.Services.All() {
		if !s.Select(sp).HasAny {
			continue
		}
		addrs := append([]netip.Addr{sp.ClusterIP}, sp.ExternalIPs...)
		addrs = append(addrs, sp.LoadBalancerVIPs...)
		var keys []key
		for _, a := range addrs {
			keys = append(keys, key{netip.AddrPortFrom(a, sp.Port), string(sp.Protocol)})
		}
		if sp.NodePort != 0 {
			keys = append(keys, key{netip.AddrPortFrom(unspec, sp.NodePort), string(sp.Protocol)})
		}
		for _, k := range keys {
			// The first claim in the model's order wins, as in Lookup.
			if old, ok := want[k]; !ok || sp.Name.Compare(old) < 0 {
				if !ok {
					order = append(order, k)
				}
				want[k] = sp.Name
			}
		}
	}
	var out []Mismatch
	have := map[key]bool{}
	for fe, kind := range l.ListeningFrontends() {
		at := fe.IP
		if !at.IsValid() {
			at = unspec
		}
		k := key{netip.AddrPortFrom(at, fe.Port), string(fe.Protocol)}
		have[k] = true
		if _, ok := want[k]; !ok {
			at := frontendString(fe, s.Family)
			out = append(out, Mismatch{Kind: Extra, Frontend: at,
				Detail: fmt.Sprintf("a forwarder listens for %s (%s), the model has no endpoint there", at, kind)})
		}
	}
	for _, k := range order {
		if !have[k] {
			out = append(out, Mismatch{Service: want[k], Kind: Missing, Frontend: k.addr.String() + "/" + k.proto,
				Detail: "no forwarder listens for it; the model has endpoints"})
		}
	}
	slices.SortFunc(out, func(a, b Mismatch) int {
		return cmp.Or(a.Service.Compare(b.Service), cmp.Compare(a.Frontend, b.Frontend))
	})
	return out
}
