// Package kerneltest runs the dataplanetest conformance suite through a real
// kernel: the dataplane under test programs a node network namespace, and
// every packet case becomes real TCP or UDP connections from a namespace
// that holds the packet's source address.
//
// The lab a Harness builds for one scenario (its namespaces are deleted when
// the test ends; the machine's own namespace is never touched):
//
//   - node: where the dataplane runs. It holds the State's node IPs on its
//     link to the outside and forwards between all the others.
//   - outside: every FromOutside source address, behind the node's "eth0",
//     routed through 169.254.0.1 (fe80::1 for IPv6) on it.
//   - one namespace per pod address, a packet's FromLocalPod source or an
//     endpoint of the State, each behind its own veth, attached as
//     Config.PodNetwork says (below).
//   - sink: the node's default route. Addresses nobody else holds (a
//     cluster IP on a port no service uses, say) are answered here, so a
//     packet the dataplane leaves alone is seen arriving where it was sent.
//
// Config.PodNetwork chooses the shape of the pod network, as CNI plugins
// give it to real nodes; a dataplane should pass its conformance in each
// (PodNetworks lists them):
//
//   - PodNetworkRouted, the zero value: Calico's shape, and that of
//     Cilium's and kube-router's routed modes. The node side of a pod's
//     veth has no address and the MAC ee:ee:ee:ee:ee:ee; the node reaches
//     the pod by a /32 (/128) route through it. An IPv4 pod routes through
//     169.254.1.1, scope link on its eth0, an address the node does not
//     hold: proxy ARP on the veth answers for it, as the node routes it out
//     of another link (its default route, to the sink). An IPv6 pod routes
//     through the veth's automatic link-local address,
//     fe80::ecee:eeff:feee:eeee, which the node answers for as its own
//     (forwarding on, no proxy NDP needed). A dataplane that needs an
//     address on the interface a pod's packet comes in through (as
//     REDIRECT does) fails here.
//   - PodNetworkBridge: the shape of docker0 or kubenet's cbr0. Every
//     pod's veth is a port of one bridge, in hairpin mode, and the bridge
//     holds the pods' gateway, 169.254.1.1/32 (fe80::1/64 for IPv6); the
//     node routes each pod address to the bridge. Pods hold /32 (/128)
//     addresses, as the scenarios' pod addresses share no subnet, so pods
//     reach each other through the node's IP layer too. Where the kernel
//     has br_netfilter it is on (every new namespace's default), as
//     Kubernetes requires on bridge networks: a DNAT to a pod on the
//     bridge is then bridged. The bridge is the one a BridgeInterface
//     detector names; under an InterfaceNamePrefix detector it is named
//     with the prefix (the node's IP layer, and so the detector, sees a
//     bridged pod's packets come in through the bridge, so only such a
//     bridge lets that detection work); "cbr0" otherwise.
//
// Pod veths are named with the prefix of an InterfaceNamePrefix detector,
// "pod" otherwise. A case whose Interface the detector tells apart from
// the lab's pod link (in a routed lab, the bridge a BridgeInterface
// detector names) cannot be sent there: filter the scenarios with the
// shape's PodNetwork.Reproducible.
//
// Every endpoint, and the address each packet is sent to, answers on its
// port with the address it was reached at and the client address it saw.
// From that Trace reads a Verdict: an answer from the packet's own
// destination is NotAService, from another address DNAT to it (repeated
// until no new endpoint turns up, so Endpoints is the whole set), a refused
// connection is Reject and silence is Drop. A connection that reached its
// endpoint from another source address was masqueraded. Session affinity
// shows as every connection reaching one endpoint while, with the
// dataplane's affinity memory cleared before each connection
// (Config.ForgetAffinity), several do.
//
// A proxy (Config.Proxy, the userspace dataplane) completes the TCP
// handshake before it decides: for it, a connection reset after it was
// accepted is Reject, one never answered is Drop, and every DNAT is
// masqueraded, as the proxy connects to the endpoint itself.
//
// A connection does not show which service rule matched, nor whether a
// client is pinned to a service's only endpoint, so the Harness implements
// dataplanetest.Partial: the suite compares it with the expected verdict
// minus those fields. Cases it cannot reproduce (spoofed sources, SCTP,
// which Go's net package lacks) are left out by Reproducible.
//
// ReplayCorpora is the other use of a lab: the model's fuzz corpora (the
// bad objects its fuzzers found, decoded by internal/fuzzobj) fed through a
// CorpusBuilder into a dataplane in a lab's node namespace, one lab per
// family, every Sync required to succeed; then one valid Service added and
// reached by real connections. Every dataplane runs the same replay, so the
// corpora mean the same to each, and the checks only a dataplane can make
// of what it wrote come in through CorpusConfig.Check.
//
// A Harness needs root and iproute2's ip; a test should skip without them
// before calling New. Every connection is bounded by a timeout and every
// sampling loop by a retry count: nothing waits forever.
package kerneltest
