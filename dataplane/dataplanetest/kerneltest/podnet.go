package kerneltest

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// PodNetwork is how a lab's pods hang off its node: the shapes CNI plugins
// give a node, which a dataplane must serve alike. The zero value is
// PodNetworkRouted.
type PodNetwork int

const (
	// PodNetworkRouted is Calico's shape (and Cilium's and kube-router's
	// routed modes): each pod behind its own veth whose node side has no
	// address, reached by a /32 (/128) route through that veth.
	PodNetworkRouted PodNetwork = iota
	// PodNetworkBridge is the shape of a bridge CNI (docker0, kubenet's
	// cbr0): every pod a port of one bridge that holds the pods' gateway
	// address.
	PodNetworkBridge
)

// PodNetworks are every shape, for a test that runs in each.
var PodNetworks = []PodNetwork{PodNetworkRouted, PodNetworkBridge}

func (n PodNetwork) String() string {
	switch n {
	case PodNetworkRouted:
		return "routed"
	case PodNetworkBridge:
		return "bridge"
	}
	return fmt.Sprintf("PodNetwork(%d)", int(n))
}

// Reproducible reports whether a lab of shape n can send case c of
// scenario s: Reproducible, and c's interface, if it names one, is
// told apart from the lab's pod links by s's local-traffic detector no
// differently than the link the lab sends c through. A routed lab has no
// bridge, so a case entering through the bridge a BridgeInterface
// detector names is for the bridge shape only. Use it with
// dataplanetest.Filter.
func (n PodNetwork) Reproducible(s dataplanetest.Scenario, c dataplanetest.PacketCase) bool {
	return Reproducible(s, c) && checkInterface(n, s.Settings.LocalDetector, c.Packet) == nil
}

// The pods' gateways. A routed pod reaches 169.254.1.1, an address no
// node link holds, by proxy ARP, and for IPv6 routes through the
// automatic link-local address of its veth's node side, whose MAC is
// routedMAC. A bridge holds both gateways itself.
var (
	podGateway4    = netip.MustParseAddr("169.254.1.1")
	bridgeGateway6 = netip.MustParseAddr("fe80::1")
	routedGateway6 = netip.MustParseAddr("fe80::ecee:eeff:feee:eeee")
)

// routedMAC is the MAC of every routed veth's node side, as Calico sets
// it: pods then need one neighbour entry for their gateway whatever veth
// they sit behind.
const routedMAC = "ee:ee:ee:ee:ee:ee"

// bridgeName is the bridge of a bridge-shaped lab: the one a
// BridgeInterface detector names; under an InterfaceNamePrefix detector
// one named with the prefix, since the node's IP layer (and so the
// dataplane) sees a bridged pod's packets come in through the bridge, not
// through the pod's veth, and only a bridge the prefix matches lets that
// detection work on such a node; cbr0 otherwise.
func bridgeName(d dataplane.LocalDetector) string {
	switch {
	case d.Interface == "":
	case d.Mode == dataplane.LocalModeBridgeInterface:
		return d.Interface
	case d.Mode == dataplane.LocalModeInterfaceNamePrefix:
		return d.Interface + "br"
	}
	return "cbr0"
}

// linkName is the name of the n-th pod's veth in the node namespace.
func linkName(d dataplane.LocalDetector, n int) string {
	if d.Mode == dataplane.LocalModeInterfaceNamePrefix && d.Interface != "" {
		return fmt.Sprintf("%s%d", d.Interface, n)
	}
	return fmt.Sprintf("pod%d", n)
}

// podInterface is the interface a pod's packets come in through, as the
// node's IP layer sees it: its own veth, or the bridge it is a port of.
func podInterface(n PodNetwork, d dataplane.LocalDetector, pod int) string {
	if n == PodNetworkBridge {
		return bridgeName(d)
	}
	return linkName(d, pod)
}

// detectsPod reports whether d counts a packet entering through iface as
// from a local pod, for the detectors that look at interfaces; the others
// do not tell interfaces apart.
func detectsPod(d dataplane.LocalDetector, iface string) bool {
	switch d.Mode {
	case dataplane.LocalModeBridgeInterface:
		return iface == d.Interface
	case dataplane.LocalModeInterfaceNamePrefix:
		return strings.HasPrefix(iface, d.Interface)
	}
	return true
}

// checkInterface reports whether a lab of shape n sends p through a link
// the detector d cannot tell from the interface p says it enters through.
func checkInterface(n PodNetwork, d dataplane.LocalDetector, p dataplane.Packet) error {
	if p.Interface == "" {
		return nil
	}
	var ok bool
	switch p.From {
	case dataplane.FromOutside:
		ok = p.Interface == outsideLink
	case dataplane.FromLocalPod:
		// Every pod link of a lab is alike to the detector.
		ok = detectsPod(d, p.Interface) == detectsPod(d, podInterface(n, d, 1))
	}
	if !ok {
		return fmt.Errorf("%w: a %s packet entering through %q in a %s lab", ErrUnreproducible, p.From, p.Interface, n)
	}
	return nil
}

// attachPod links pod h to the node as the lab's shape does it and routes
// a, its address, to it.
func (l *lab) attachPod(h *host, a netip.Addr) error {
	nodeLink := linkName(l.detector, l.pods)
	peer := " type veth peer name " + peerLink + " netns " + h.ns.Name
	// Hairpin mode, as kubenet and the bridge plugin set it: with
	// br_netfilter a DNAT to an address on the bridge is bridged, back out
	// of the port it came in on when a pod reaches itself.
	node := []string{"link add " + nodeLink + peer, "link set " + nodeLink + " master " + l.bridge + " up",
		"link set dev " + nodeLink + " type bridge_slave hairpin on"}
	if l.network == PodNetworkRouted {
		node = []string{"link add " + nodeLink + " address " + routedMAC + peer, "link set " + nodeLink + " up"}
	}
	if err := batch(l.node.ns, node...); err != nil {
		return err
	}
	if l.network == PodNetworkRouted && !l.v6() {
		// Proxy ARP answers for a gateway that routes out of another
		// link (169.254.1.1 goes out through the node's default route,
		// the sink); no delay, as there is no other answer to wait for.
		if err := writeSysctls(l.node.ns, map[string]string{
			"/proc/sys/net/ipv4/conf/" + nodeLink + "/proxy_arp":    "1",
			"/proc/sys/net/ipv4/neigh/" + nodeLink + "/proxy_delay": "0",
		}); err != nil {
			return err
		}
	}
	gw := podGateway4
	switch {
	case l.v6() && l.network == PodNetworkBridge:
		gw = bridgeGateway6
	case l.v6():
		gw = routedGateway6
	}
	pod := []string{"link set " + peerLink + " up"}
	if l.v6() {
		pod = append(pod, fmt.Sprintf("route add ::/0 via %s dev %s", gw, peerLink))
	} else {
		pod = append(pod, fmt.Sprintf("route add %s/32 dev %s scope link", gw, peerLink),
			fmt.Sprintf("route add 0.0.0.0/0 via %s dev %s", gw, peerLink))
	}
	if err := batch(h.ns, pod...); err != nil {
		return err
	}
	if l.network == PodNetworkRouted && l.v6() {
		if err := l.waitLinkLocal(nodeLink); err != nil {
			return err
		}
	}
	if err := l.place(h, a); err != nil {
		return err
	}
	return batch(l.node.ns, fmt.Sprintf("route add %s dev %s", a, podInterface(l.network, l.detector, l.pods)))
}

// linkLocalTries bounds the wait for a veth's link-local address: the
// kernel adds it once the carrier is up, after the link comes up.
const (
	linkLocalTries = 300
	linkLocalPause = 10 * time.Millisecond
)

// waitLinkLocal waits until the node's link dev holds routedGateway6,
// ready: until then a routed IPv6 pod has no gateway answering.
func (l *lab) waitLinkLocal(dev string) error {
	return l.node.ns.Do(func() error {
		link, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("find link %s in %s: %w", dev, l.node.ns.Name, err)
		}
		for range linkLocalTries {
			addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
			if err != nil {
				return fmt.Errorf("list the addresses of %s in %s: %w", dev, l.node.ns.Name, err)
			}
			for _, a := range addrs {
				if ip, ok := netip.AddrFromSlice(a.IP); ok && ip == routedGateway6 && a.Flags&unix.IFA_F_TENTATIVE == 0 {
					return nil
				}
			}
			time.Sleep(linkLocalPause)
		}
		return fmt.Errorf("%s in %s has no link-local address %s after %v", dev, l.node.ns.Name, routedGateway6, linkLocalTries*linkLocalPause)
	})
}
