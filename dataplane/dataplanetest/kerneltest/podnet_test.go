package kerneltest

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// podShape is what a node shows of one pod's attachment.
type podShape struct {
	// Addrs are the addresses of the pod link's node side.
	Addrs []netip.Addr
	// Route is the interface the node routes the pod's address through.
	Route string
	// GatewayLocal says the IPv4 pods' gateway is an address of the node.
	GatewayLocal bool
	// Reached is the answer to a connection from the pod across the node,
	// which needs the pod's gateway to answer.
	Reached answer
}

// TestPodNetworkShapes checks each shape's node side and that a pod's
// connection crosses the node through its gateway.
func TestPodNetworkShapes(t *testing.T) {
	netns.Require(t)
	pod4, dst4 := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddrPort("192.0.2.9:80")
	pod6, dst6 := netip.MustParseAddr("fd00::2"), netip.MustParseAddrPort("[2001:db8::9]:80")
	for _, tc := range []struct {
		name   string
		family v1.IPFamily
		net    PodNetwork
		pod    netip.Addr
		dst    netip.AddrPort
		want   podShape
	}{
		{"routed v4", v1.IPv4Protocol, PodNetworkRouted, pod4, dst4, podShape{Route: "pod1"}},
		{"routed v6", v1.IPv6Protocol, PodNetworkRouted, pod6, dst6, podShape{Addrs: []netip.Addr{routedGateway6}, Route: "pod1"}},
		{"bridge v4", v1.IPv4Protocol, PodNetworkBridge, pod4, dst4, podShape{Addrs: []netip.Addr{podGateway4}, Route: "cbr0", GatewayLocal: true}},
		{"bridge v6", v1.IPv6Protocol, PodNetworkBridge, pod6, dst6, podShape{Addrs: []netip.Addr{bridgeGateway6}, Route: "cbr0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := newLab(t, tc.family, dataplane.LocalDetector{}, tc.net)
			if err != nil {
				t.Fatal(err)
			}
			h, err := l.pod(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.serveDestination(tc.dst, "tcp"); err != nil {
				t.Fatal(err)
			}
			var got podShape
			if got.Reached, err = connect(h.ns, "tcp", tc.pod, tc.dst, false, sourcePorts()); err != nil {
				t.Fatal(err)
			}
			if err := l.node.ns.Do(func() error { return readShape(&got, podInterface(tc.net, l.detector, 1), tc.pod) }); err != nil {
				t.Fatal(err)
			}
			tc.want.Reached = answer{outcome: answered, reached: tc.dst, client: tc.pod}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(answer{}), cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})); d != "" {
				t.Errorf("pod attachment (-want +got):\n%s", d)
			}
		})
	}
}

// readShape reads, in the calling thread's namespace, the addresses of
// link in pod's family (a link-local address only if it is a gateway),
// the route to pod and, for IPv4, whether the pods' gateway is local.
func readShape(s *podShape, link string, pod netip.Addr) error {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return err
	}
	family := netlink.FAMILY_V4
	if pod.Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := netlink.AddrList(l, family)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		if ip = ip.Unmap(); !ip.IsLinkLocalUnicast() || ip == routedGateway6 || ip == bridgeGateway6 || ip == podGateway4 {
			s.Addrs = append(s.Addrs, ip)
		}
	}
	r, err := routeGet(pod)
	if err != nil {
		return err
	}
	via, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return err
	}
	s.Route = via.Attrs().Name
	if pod.Is4() {
		r, err := routeGet(podGateway4)
		if err != nil {
			return err
		}
		s.GatewayLocal = r.Type == unix.RTN_LOCAL
	}
	return nil
}

func routeGet(a netip.Addr) (netlink.Route, error) {
	routes, err := netlink.RouteGet(a.AsSlice())
	if err != nil {
		return netlink.Route{}, fmt.Errorf("route to %s: %w", a, err)
	}
	if len(routes) != 1 {
		return netlink.Route{}, fmt.Errorf("route to %s: %d routes", a, len(routes))
	}
	return routes[0], nil
}
