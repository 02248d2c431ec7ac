// Package kerneltest runs the dataplanetest conformance suite through a real
// kernel: the dataplane under test programs a node network namespace, and
// every packet case becomes real TCP or UDP connections from a namespace
// that holds the packet's source address.
//
// The lab a Harness builds for one scenario (its namespaces are deleted when
// the test ends; the machine's own namespace is never touched):
//
//   - node: where the dataplane runs. It holds the State's node IPs and
//     forwards between all the others; every other namespace routes through
//     it (gateway 169.254.1.1, or fe80::1 for IPv6, on each of its links).
//   - outside: every FromOutside source address, behind the node's "eth0".
//   - one namespace per pod address, a packet's FromLocalPod source or an
//     endpoint of the State, behind its own veth. Link names follow the
//     State's local-traffic detector: the interface prefix in
//     InterfaceNamePrefix mode, ports of the named bridge in
//     BridgeInterface mode.
//   - sink: the node's default route. Addresses nobody else holds (a
//     cluster IP on a port no service uses, say) are answered here, so a
//     packet the dataplane leaves alone is seen arriving where it was sent.
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
// A Harness needs root and iproute2's ip; a test should skip without them
// before calling New. Every connection is bounded by a timeout and every
// sampling loop by a retry count: nothing waits forever.
package kerneltest
