package kerneltest

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// The node's names and addresses. The outside and the sink reach the node
// through linkGateway on their link (a /32, or a link-local address for
// IPv6); the sink also needs an address of its own, as the node's next
// hop. Pods have gateways of their own (podnet.go), which only a bridge
// holds: a routed pod's gateway is no address of the node.
const (
	outsideLink = "eth0"
	sinkLink    = "sink"
	peerLink    = "eth0"
)

var (
	linkGateway4, sinkHop4 = netip.MustParseAddr("169.254.0.1"), netip.MustParseAddr("169.254.0.2")
	linkGateway6, sinkHop6 = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
)

type role int

const (
	roleNode role = iota
	roleOutside
	rolePod
	roleSink
)

// host is one namespace of the lab.
type host struct {
	ns   *netns.NS
	role role
}

// lab is the namespaces of one Harness and who holds which address.
type lab struct {
	t        testing.TB
	family   v1.IPFamily
	detector dataplane.LocalDetector
	network  PodNetwork
	// bridge is the bridge every pod is a port of, in the bridge shape.
	bridge  string
	node    *host
	outside *host
	sink    *host
	// holder maps each address placed in the lab to its namespace.
	holder map[netip.Addr]*host
	pods   int
	// serving records the listeners started, by namespace.
	serving map[listenKey]bool
	// ports gives the probes' TCP source ports (see sourcePorts).
	ports func() uint16
}

func newLab(t testing.TB, family v1.IPFamily, d dataplane.LocalDetector, n PodNetwork) (*lab, error) {
	l := &lab{t: t, family: family, detector: d, network: n, holder: map[netip.Addr]*host{}, serving: map[listenKey]bool{}, ports: sourcePorts()}
	var err error
	if l.node, err = l.newHost("node", roleNode); err != nil {
		return nil, err
	}
	// A Reject is seen only if its ICMP error arrives: no rate limit,
	// and no redirects (sent when the lab hairpins) using up the tokens
	// the rate limit shares with them. Forwarding is all a routed IPv6
	// pod needs: it routes through its veth's link-local address, which
	// the node answers for as its own, so no proxy NDP. Link-local
	// addresses are made from the MAC, as a routed pod expects.
	if err := writeSysctls(l.node.ns, map[string]string{
		"/proc/sys/net/ipv6/conf/default/addr_gen_mode":  "0",
		"/proc/sys/net/ipv4/ip_forward":                  "1",
		"/proc/sys/net/ipv6/conf/all/forwarding":         "1",
		"/proc/sys/net/ipv4/icmp_ratelimit":              "0",
		"/proc/sys/net/ipv6/icmp/ratelimit":              "0",
		"/proc/sys/net/ipv4/conf/all/send_redirects":     "0",
		"/proc/sys/net/ipv4/conf/default/send_redirects": "0",
	}); err != nil {
		return nil, err
	}
	if n == PodNetworkBridge {
		l.bridge = bridgeName(d)
		addr := podGateway4.String() + "/32"
		if l.v6() {
			addr = bridgeGateway6.String() + "/64 nodad"
		}
		if err := batch(l.node.ns, "link add "+l.bridge+" type bridge", "link set "+l.bridge+" up",
			"addr add "+addr+" dev "+l.bridge); err != nil {
			return nil, err
		}
	}
	if l.outside, err = l.newHost("outside", roleOutside); err != nil {
		return nil, err
	}
	if err := l.connect(l.outside, outsideLink); err != nil {
		return nil, err
	}
	if l.sink, err = l.newHost("sink", roleSink); err != nil {
		return nil, err
	}
	if err := l.connect(l.sink, sinkLink); err != nil {
		return nil, err
	}
	hop, dflt := sinkHop4, "0.0.0.0/0"
	addr := hop.String() + "/32"
	if l.v6() {
		hop, dflt, addr = sinkHop6, "::/0", sinkHop6.String()+"/64 nodad"
	}
	if err := batch(l.sink.ns, "addr add "+addr+" dev "+peerLink); err != nil {
		return nil, err
	}
	nodeRoutes := []string{fmt.Sprintf("route add %s via %s dev %s", dflt, hop, sinkLink)}
	if !l.v6() {
		nodeRoutes = append([]string{fmt.Sprintf("route add %s/32 dev %s", hop, sinkLink)}, nodeRoutes...)
	}
	return l, batch(l.node.ns, nodeRoutes...)
}

func (l *lab) v6() bool { return l.family == v1.IPv6Protocol }

// newHost creates a namespace set up as a plain host: no duplicate address
// detection (addresses are usable at once), no reverse-path filter (the lab
// routes asymmetrically on purpose when it hairpins), and no IPv6
// redirects taken. The node, forwarding a reply from one bridged pod to
// another out of the bridge it came in on, tells the sender the other is
// on-link (IPv6 has no send_redirects to turn off, as the node does for
// IPv4); a pod that took it would answer later connections over the
// bridge itself, past the node, where IPVS could not undo its NAT: the
// client would hear from the endpoint instead of the service, and its
// connection time out.
func (l *lab) newHost(name string, r role) (*host, error) {
	ns, err := netns.Create(l.t, name)
	if err != nil {
		return nil, err
	}
	if err := writeSysctls(ns, map[string]string{
		"/proc/sys/net/ipv4/conf/all/rp_filter":            "0",
		"/proc/sys/net/ipv4/conf/default/rp_filter":        "0",
		"/proc/sys/net/ipv6/conf/all/accept_dad":           "0",
		"/proc/sys/net/ipv6/conf/default/accept_dad":       "0",
		"/proc/sys/net/ipv6/conf/all/accept_redirects":     "0",
		"/proc/sys/net/ipv6/conf/default/accept_redirects": "0",
	}); err != nil {
		return nil, err
	}
	return &host{ns: ns, role: r}, nil
}

// writeSysctls writes the namespace's own copies of net sysctls: a file
// under /proc/sys/net opened from a thread inside ns is ns's.
func writeSysctls(ns *netns.NS, sysctls map[string]string) error {
	return ns.Do(func() error {
		for path, v := range sysctls {
			if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s in %s: %w", path, ns.Name, err)
			}
		}
		return nil
	})
}

// connect links the outside or the sink to the node: nodeLink on the
// node side, holding the link gateway, peerLink in h, with h's default
// route through it.
func (l *lab) connect(h *host, nodeLink string) error {
	gw, peer := fmt.Sprintf("addr add %s/32 dev %s", linkGateway4, nodeLink), []string{
		"link set " + peerLink + " up",
		fmt.Sprintf("route add %s/32 dev %s scope link", linkGateway4, peerLink),
		fmt.Sprintf("route add 0.0.0.0/0 via %s dev %s", linkGateway4, peerLink),
	}
	if l.v6() {
		gw = fmt.Sprintf("addr add %s/64 dev %s nodad", linkGateway6, nodeLink)
		peer = []string{"link set " + peerLink + " up", fmt.Sprintf("route add ::/0 via %s dev %s", linkGateway6, peerLink)}
	}
	if err := batch(l.node.ns, "link add "+nodeLink+" type veth peer name "+peerLink+" netns "+h.ns.Name,
		"link set "+nodeLink+" up", gw); err != nil {
		return err
	}
	return batch(h.ns, peer...)
}

// place gives h address a (on its link, or on loopback for the sink) and
// routes a to it from the node.
func (l *lab) place(h *host, a netip.Addr) error {
	if err := l.placeable(a); err != nil {
		return err
	}
	if held, ok := l.holder[a]; ok {
		if held != h {
			return fmt.Errorf("%w: %s is needed in %s but held by %s", ErrUnreproducible, a, h.ns.Name, held.ns.Name)
		}
		return nil
	}
	cidr := a.String() + "/32"
	if a.Is6() {
		cidr = a.String() + "/128 nodad"
	}
	dev := peerLink
	switch h.role {
	case roleSink:
		dev = "lo"
	case roleNode:
		dev = outsideLink
	}
	if err := batch(h.ns, "addr add "+cidr+" dev "+dev); err != nil {
		return err
	}
	if h.role == roleOutside {
		if err := batch(l.node.ns, fmt.Sprintf("route add %s dev %s", a, outsideLink)); err != nil {
			return err
		}
	}
	l.holder[a] = h
	return nil
}

// placeable reports whether a can be an address of a lab namespace.
func (l *lab) placeable(a netip.Addr) error {
	if a.Is6() != l.v6() || a.Is4In6() || !a.IsGlobalUnicast() {
		return fmt.Errorf("%w: %s has no place in an %s lab", ErrUnreproducible, a, l.family)
	}
	return nil
}

// pod returns the pod namespace holding a, creating it behind a new link.
func (l *lab) pod(a netip.Addr) (*host, error) {
	if h, ok := l.holder[a]; ok {
		if h.role != rolePod {
			return nil, fmt.Errorf("%w: pod address %s is held by %s", ErrUnreproducible, a, h.ns.Name)
		}
		return h, nil
	}
	if err := l.placeable(a); err != nil {
		return nil, err
	}
	h, err := l.newHost("pod", rolePod)
	if err != nil {
		return nil, err
	}
	l.pods++
	return h, l.attachPod(h, a)
}

// setNodeIPs places the node's addresses on its outside link.
func (l *lab) setNodeIPs(ips []netip.Addr) error {
	for _, ip := range ips {
		if err := l.place(l.node, ip); err != nil {
			return err
		}
	}
	return nil
}

// serveEndpoint starts TCP and UDP listeners at ep, in a pod namespace
// unless the node holds the address (a host-network endpoint).
func (l *lab) serveEndpoint(ep netip.AddrPort) error {
	h := l.holder[ep.Addr()]
	if h == nil || h.role != roleNode {
		var err error
		if h, err = l.pod(ep.Addr()); err != nil {
			return err
		}
	}
	for _, nw := range []string{"tcp", "udp"} {
		if err := l.listen(h, nw, ep); err != nil {
			return err
		}
	}
	return nil
}

// serveDestination makes sure whoever holds dst's address answers on it,
// so that a packet passing untranslated is seen arriving; an address the
// lab does not hold yet goes to the sink.
func (l *lab) serveDestination(dst netip.AddrPort, nw string) error {
	a := dst.Addr()
	h := l.holder[a]
	if a.IsLoopback() {
		h = l.node
	} else if h == nil {
		h = l.sink
		if err := l.place(h, a); err != nil {
			return err
		}
	}
	return l.listen(h, nw, dst)
}

// sender returns the namespace that sends p, holding its source.
func (l *lab) sender(p dataplane.Packet) (*host, error) {
	if err := checkInterface(l.network, l.detector, p); err != nil {
		return nil, err
	}
	switch p.From {
	case dataplane.FromNode:
		if h := l.holder[p.Src]; p.Src.IsLoopback() || h == l.node {
			return l.node, nil
		}
		return nil, fmt.Errorf("%w: the node would have to spoof %s", ErrUnreproducible, p.Src)
	case dataplane.FromOutside:
		return l.outside, l.place(l.outside, p.Src)
	case dataplane.FromLocalPod:
		return l.pod(p.Src)
	}
	return nil, fmt.Errorf("%w: origin %v", ErrUnreproducible, p.From)
}

// batch runs ip commands inside ns with one fork.
func batch(ns *netns.NS, cmds ...string) error {
	cmd := ns.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -batch in %s: %w: %s\n%s", ns.Name, err, out, strings.Join(cmds, "\n"))
	}
	return nil
}
