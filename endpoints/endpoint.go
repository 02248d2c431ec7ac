package endpoints

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/affinity"
)

// Endpoint is one backend of one service port. It is immutable once a
// tracker or NewMap has it: snapshots share Endpoints, so never modify one
// that came from them.
type Endpoint struct {
	Addr netip.AddrPort
	affinity.EndpointInfo
}

// String returns "ip:port", with IPv6 addresses bracketed.
func (e *Endpoint) String() string { return e.Addr.String() }

// IP returns the endpoint's address.
func (e *Endpoint) IP() netip.Addr { return e.Addr.Addr() }

// sameEndpoint reports whether a and b agree in every field, so that a
// re-published but otherwise identical endpoint is not a change.
func sameEndpoint(a, b *Endpoint) bool {
	if a == b {
		return true
	}
	return a.Addr == b.Addr &&
		a.Ready == b.Ready &&
		a.Serving == b.Serving &&
		a.Terminating == b.Terminating &&
		a.Local == b.Local &&
		a.NodeName == b.NodeName &&
		a.Zone == b.Zone &&
		slices.Equal(a.ZoneHints, b.ZoneHints) &&
		slices.Equal(a.NodeHints, b.NodeHints)
}

// comparePreference orders endpoints that share one address so that the one
// to keep sorts first. Non-terminating beats terminating, as upstream does
// for a pod IP reused while the old pod is still terminating; the remaining
// keys only exist to make the choice a function of content alone, so that
// neither slice names nor the order of slices or endpoints decide it.
func comparePreference(a, b *Endpoint) int {
	return cmp.Or(
		trueFirst(!a.Terminating, !b.Terminating),
		trueFirst(a.Ready, b.Ready),
		trueFirst(a.Serving, b.Serving),
		trueFirst(a.Local, b.Local),
		cmp.Compare(a.NodeName, b.NodeName),
		cmp.Compare(a.Zone, b.Zone),
		slices.Compare(a.ZoneHints, b.ZoneHints),
		slices.Compare(a.NodeHints, b.NodeHints),
	)
}

func trueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}
