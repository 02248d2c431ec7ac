// Package dataplane holds what every dataplane programs and the rules it
// must follow: State, one immutable view of the services of one IP family
// as this node sees them; Builder, which makes States from Kubernetes
// objects; State.Lookup, the executable specification of where a packet
// goes; and Dataplane, the interface each implementation satisfies.
//
// # The flow
//
// Services, EndpointSlices and this node's Node object go into a Builder
// (from informers, manifest files or the caller's own source).
// Builder.Build checks out the Builder's per-family trackers and returns a
// BuildResult: one State per family, plus what changed in each
// (FamilyChanges), including the UDP and SCTP destinations that became
// stale for conntrack cleanup. The caller Syncs each State into its
// dataplanes. A Build costs O(changes since the previous one): States share
// everything unchanged with their predecessors.
//
// # States are immutable
//
// A State and everything reachable from it (the maps, ports, endpoints,
// node addresses) is never modified once built, so dataplanes can keep
// the last State they programmed, compare, and look things up from any
// goroutine without locks. Share States by pointer.
//
// A State also travels as JSON (MarshalJSON, UnmarshalJSON): a running
// proxy can hand its model to a troubleshooting tool in another process,
// which answers Lookup, Select and the troubleshoot package's questions
// from exactly what the proxy programs. Decoding checks what a Builder
// guarantees and fails with ErrStateFormat otherwise.
//
// # Lookup is the specification
//
// State.Lookup answers, for the first packet of a connection, what
// kube-proxy's iptables mode (v1.37) does with it, as a Verdict: not a
// service, accept, reject, drop, or DNAT to one of a set of endpoints,
// with whether the connection is masqueraded and whether ClientIP affinity
// pins it. Every dataplane's tests compare against it (package
// dataplanetest), and the node agent's explain command prints it. The
// rules, by destination:
//
//   - A cluster IP, port and protocol: rejected when the port has no usable
//     endpoint anywhere; dropped under internalTrafficPolicy Local with no
//     local endpoint; otherwise DNATed to the internal-policy endpoints,
//     masqueraded when MasqueradeAll is set or when a local-traffic
//     detector is configured and the packet is not local pod traffic
//     (off-cluster clients routed to the service CIDR through this node).
//   - An external IP, LoadBalancer VIP or node port (an external
//     destination): rejected without endpoints. A VIP with
//     loadBalancerSourceRanges drops sources outside every range, except
//     that when a range holds one of the node's IPs the port's VIPs are
//     allowed as sources too (a node reaching a VIP it owns sends from the
//     VIP). Node ports ignore source ranges. Under externalTrafficPolicy
//     Cluster the packet is masqueraded and DNATed to the cluster
//     endpoints. Under Local, local pod traffic goes to the cluster
//     endpoints unmasqueraded (as if it had gone out through the load
//     balancer and back), traffic from the node itself (Packet.From is
//     FromNode, or the source is a node IP or loopback) goes to the cluster
//     endpoints masqueraded, and everything else goes to the local
//     endpoints with its source kept, or is dropped when there are none.
//   - Node ports are served on the node addresses NodePortAddresses
//     selects, and on IPv4 loopback with LocalhostNodePorts (see Settings).
//     Node ports without endpoints are rejected (or dropped) on every local
//     address whatever NodePortAddresses says, as kube-proxy's filter rules
//     match "--dst-type LOCAL".
//   - A health-check node port (TCP, on a local address) is accepted
//     through the local firewall, endpoints or not.
//   - Anything else is not a service. That includes a cluster IP on a port
//     it does not serve and an unallocated address in the service CIDR,
//     which iptables mode lets through untouched; nftables mode rejects
//     the first and drops the second.
//
// # nftables mode
//
// State.LookupMode(ModeNFTables, p) answers as kube-proxy's nftables mode
// does where it deliberately differs from its iptables mode:
//
//   - A cluster IP on a port it does not serve is rejected (with no
//     Service in the Verdict: no port matched).
//   - loadBalancerSourceRanges drop before DNAT, so they apply to a VIP
//     whose port has no endpoints too (iptables rejects it).
//   - Node ports are never served on loopback (LocalhostNodePorts is
//     ignored), and node ports without endpoints are rejected or dropped
//     only on the addresses that serve node ports, not on every local
//     address.
//   - Health-check node ports get no accept rule: they are NotAService.
//   - Hairpin masquerading covers only endpoints on this node, so a
//     remote endpoint reached from its own address is not a Hairpin.
//
// kube-proxy's nftables mode also defaults --nodeport-addresses to the
// node's primary IPs (Settings.NodePortPrimary): that is configuration,
// which the caller sets, not a difference of semantics.
//
// # ipvs mode
//
// State.LookupMode(ModeIPVS, p) answers as kube-proxy's IPVS mode, and the
// ipvs package, do by design:
//
//   - Every service address (cluster IP, external IP, VIP) is bound to
//     the node, so a port or protocol no service serves on it is rejected
//     by the node's stack (with no Service in the Verdict).
//   - Node ports are never served on loopback (LocalhostNodePorts is
//     ignored), and node ports without endpoints are rejected or dropped
//     only on the addresses that serve node ports.
//   - Internal traffic (from the node or a local pod) to an external IP,
//     VIP or node port of a service whose internal and external traffic
//     policies are both Local goes to its cluster IP: it reaches the local
//     endpoints only (masqueraded from the node), and is dropped without
//     any. With externalTrafficPolicy Local alone it reaches every
//     endpoint, as in iptables mode.
//
// # userspace mode
//
// State.LookupMode(ModeUserspace, p) answers as the userspace package's
// proxy does by design:
//
//   - The proxy connects to every endpoint from its own address: every
//     DNAT is masqueraded (Hairpin still lists the candidates that are
//     the source).
//   - Health-check node ports get no accept rule (there is no firewall to
//     open): they are NotAService.
//   - SCTP is not served: every SCTP packet is NotAService.
//
// Lookup, ModeIPTables and any other Mode follow iptables mode; the four
// Mode values are kube-proxy's --proxy-mode names.
//
// Local pod traffic is decided by Settings.LocalDetector: by source
// address (ClusterCIDR: the configured CIDRs; NodeCIDR: the node's pod
// CIDRs) or by input interface (BridgeInterface, InterfaceNamePrefix:
// Packet.Interface; traffic from the node has none). With no detector,
// nothing is local pod traffic and the rules that need one are left out.
//
// Settings.Validate refuses what no rule may hold: an unknown detector
// mode, a CIDR that is no prefix (or an IPv4-mapped IPv6 one), and an
// interface that is not 1 to 15 bytes of ASCII letters, digits, '-', '_'
// and '.' (IsInterfaceName, IsInterfaceNamePrefix). proxykit.New refuses
// such Settings, and every dataplane of this module refuses to program a
// State that holds them, so that a bad value is an error at start-up,
// never a rule left out or, worse, a name written verbatim into an
// iptables-restore input.
//
// Verdict.Endpoints is the candidate set, sorted by address, one of which
// a connection reaches. A connection DNATed back to its own source
// (hairpin) is always masqueraded: Verdict.Hairpin lists the candidates
// that would be, Verdict.Masquerade is set when every connection is, and
// Verdict.Masqueraded answers for one chosen endpoint.
//
// # Where we differ from kube-proxy
//
//   - When several ports claim one destination (two services with one
//     external IP and port), the winner is the first by namespace, name,
//     port name and protocol, where kube-proxy's depends on map order; and
//     the Builder warns once when several services come to claim one,
//     where kube-proxy is silent.
//   - Source ranges admit the VIPs as sources when a range holds any of
//     the node's IPs, not only its primary one.
//   - Several detector CIDRs per family are honoured (kube-proxy accepts
//     one).
//   - A change of the node's IPs or pod CIDRs triggers a rebuild, and a
//     deleted Node keeps its last known information; kube-proxy exits.
//   - The node's local addresses are Node.IPs (its InternalIPs, then
//     ExternalIPs) and loopback, rather than whatever the interfaces hold.
//   - The detector's interface must be a name Settings.Validate accepts;
//     kube-proxy refuses only an empty one (in its configuration) and
//     writes any other into its rules as given.
//
// # Partial syncs
//
// A dataplane that remembers the State it last programmed asks the next
// State ChangedFrom(thatState): when ok, only the services in the set need
// reprogramming (the frontends of all others are unchanged); otherwise,
// and always after a failed Sync or for a State of another Builder (whose
// Generations count on their own), it programs everything.
// ChangedSince(generation) answers the same for States of one Builder.
//
// # Reconciling
//
// What a dataplane remembers having programmed can become wrong: other
// programs write the same kernel. Who decides and who does what is fixed:
// the caller (the proxykit package) owns the schedule, one reconcile
// period plus "the kernel changed under you" signals; a dataplane that can
// read back what it owns implements Reconciler, whose Reconcile compares
// the kernel with its last successful Sync and repairs only what differs,
// returning the Drift it repaired (the caller counts and logs it); one
// that can tell cheaply that its rules were flushed implements
// KernelWatcher (a canary), polled on a short period. A dataplane that
// is no Reconciler is made to program everything once per period. The
// conformance suite (dataplanetest.Drifter) disturbs every dataplane that
// lets it and requires the repair.
//
// # Without a kernel
//
// Each dataplane has one way to run without touching the kernel, its fake
// backend, which answers as the kernel would and can trace a packet
// through what was programmed: iptables an xtables.FakeRunner (a
// simulated iptables that records and can print every restore input; the
// node agent's --dry-run), nftables a knftables.Fake, IPVS the handles of
// ipvs/ipvstest with an xtables.FakeRunner, and userspace, whose
// unprivileged mode needs no privilege at all, a FakeRunner and a fake
// policy route for redirect mode. Code that drives
// a dataplane (a sync loop, a proxy) is tested with
// dataplanetest.Recorder, which stands in for any dataplane and records
// the States it is given.
//
// # Implementing a Dataplane
//
// Sync must make forwarding match the State, leaving everything it does
// not own alone; after an error the previous programming stays and the
// next Sync is a full one. Implement SyncReporter so that logs and metrics
// say truthfully whether a Sync rewrote everything. Endpoint selection is State.Select, never a
// re-implementation of traffic policy or topology. Cleanup removes what
// the dataplane owns and succeeds when there is nothing to remove. Run
// dataplanetest.Run against the implementation: it checks, packet by
// packet, that what was programmed agrees with Lookup, or with LookupMode
// of the mode its harness names (dataplanetest.Moded).
package dataplane
