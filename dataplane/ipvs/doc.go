// Package ipvs is the IPVS dataplane, kube-proxy's ipvs mode: every
// service frontend is an IPVS virtual server whose real servers are the
// endpoints State.Select chooses, programmed through github.com/moby/ipvs,
// with the service addresses bound to a dummy link and the few decisions
// IPVS cannot make (masquerading, drops, source ranges) taken by a fixed
// iptables ruleset matching ipsets, which github.com/vishvananda/netlink
// keeps. Nothing is exec'd but iptables-restore, through the iptables
// package's Runner.
//
// # What is programmed
//
// For each service port of the State's family: a virtual server on the
// cluster IP, on each external IP and LoadBalancer VIP, and, for node
// ports, on each node address Settings.NodePortAddresses selects (loopback
// never: IPVS cannot serve it). Each has the Config's scheduler and
// scheduler flags (mh always gets flag-2, hashing the source port too, as
// in kube-proxy), ClientIP affinity as persistence with the service's
// timeout, and real servers in NAT mode, weight 1: the internal-policy
// endpoints on the cluster IP, the external-policy ones elsewhere. A port
// without endpoints keeps its virtual servers without real servers, which
// IPVS answers with ICMP port unreachable (a reject).
//
// Cluster IPs, external IPs and VIPs are bound to the dummy link
// Config.Link (DefaultLink, never kube-proxy's kube-ipvs0), which is never
// set up: its addresses only make the kernel take the packets as local,
// where IPVS sees them. An address the link got from anyone else is never
// removed.
//
// The ipsets (prefix "PKV-", "PKV6-" for IPv6) hold, for the iptables
// chains: the bound addresses (IPS); cluster IPs with endpoints
// (CLUSTER-IP); external destinations by traffic policy (EXTERNAL,
// EXTERNAL-LOCAL, NODE-PORT, NODE-PORT-LOCAL); endpoints that can be
// their own client (LOOP-BACK, masqueraded); destinations whose policy
// leaves them no endpoint (DROP); VIPs with loadBalancerSourceRanges and
// what they admit (FIREWALL, SOURCE-CIDR, SOURCE-IP); and health-check
// node ports (HEALTH-CHECK, accepted). The chains PKV-SERVICES (nat
// PREROUTING and OUTPUT), PKV-MARK-MASQ, PKV-POSTROUTING (nat
// POSTROUTING), PKV-FILTER (filter INPUT), PKV-SOURCE-RANGES and
// PKV-FORWARD (filter FORWARD) only match those sets, so they are written
// once and change only with the settings (masqueradeAll, the local
// traffic detector).
//
// # Syncs that cost what changed
//
// The first Sync, a Sync after a failure and a Sync whose State cannot
// say what changed diff against the kernel: one dump of the virtual
// servers, one of the link's addresses, one per ipset and one of the real
// servers of each wanted virtual server, then one call per difference, so
// that a restarted dataplane changes nothing that is right. Every other
// Sync looks only at the services State.ChangedSince names, and of their
// virtual servers only at those whose options or endpoints changed: one
// dump of its real servers and one call per difference. Removing or
// moving one endpoint costs the same number of netlink calls in a cluster
// of 1,000 or 10,000 services (measured on the fakes: 4 calls to remove
// an endpoint of a ClusterIP service, 12 to move one of a NodePort service
// on a node with two addresses; a first full sync of 1,000 services of 10
// endpoints costs 30,029 calls, a full diff of an unchanged kernel 1,515).
// Timed through a real IPVS kernel in the test VM (BenchmarkKernelSync;
// qemu without KVM, so every figure is several times a real machine's):
// a first full sync of 1,000 services of 10 endpoints takes 10 s, of
// 10,000 services 232 s; a one-endpoint change 28 ms at 1,000 and 15 ms at
// 10,000 services. The iptables dataplane on the same 1,000 services in
// the same VM (iptables-nft): 92 s and 371 ms.
//
// # Graceful termination
//
// A TCP real server that is no longer wanted while it has active
// connections gets weight 0: its connections go on, new ones go
// elsewhere. Every Sync and Reconcile deletes those whose active
// connections reached zero or that have been draining for
// Config.DrainTimeout (DefaultDrainTimeout), with one dump per virtual
// server that has draining real servers: nothing ever waits. Draining
// lists them. UDP and SCTP real servers are deleted at once; their
// conntrack entries are stale flows of the State's Build, which the caller
// deletes with package conntrack (the proxykit package does after every
// sync), and expire_nodest_conn drops IPVS's own entries on their next
// packet. An endpoint that comes back while draining gets weight 1 again.
//
// # Kernel settings
//
// The first Sync sets, through Config.Sysctl:
//
//   - net/ipv4/vs/conntrack=1: IPVS connections get conntrack entries, so
//     that the iptables masquerade rules see them;
//   - net/ipv4/vs/expire_nodest_conn=1: a connection whose real server is
//     gone is dropped on its next packet instead of hanging;
//   - net/ipv4/vs/expire_quiescent_template=1: persistence templates of a
//     weight-0 real server expire, so that ClientIP affinity does not
//     pin new connections to a draining endpoint;
//   - net/ipv4/ip_forward=1 (and net/ipv6/conf/all/forwarding=1 for IPv6).
//   - With Config.StrictARP, net/ipv4/conf/all/arp_ignore=1 and
//     arp_announce=2: every node binds every VIP to its dummy link, and
//     without them each would answer ARP for all of them, which breaks
//     load balancers that announce VIPs from one node (MetalLB's layer 2
//     mode requires it).
//
// conn_reuse_mode is left alone: kube-proxy sets it to 0 only on kernels
// before 5.9, whose reuse handling was broken. Config.TCPTimeout,
// TCPFinTimeout and UDPTimeout set IPVS's own timeouts (ipvsadm --set);
// zero keeps the kernel's.
//
// # Ownership and Cleanup
//
// The sets record what the dataplane made: a virtual server is its own
// when its address is in IPS or its address and port in NODE-PORT or
// NODE-PORT-LOCAL. Syncs and Cleanup delete only those, so IPVS services
// of other programs survive, and a new process (the node agent's
// --cleanup) finds what an earlier one left. Cleanup then unbinds its
// addresses, deletes the link unless another program put addresses on it,
// unhooks and deletes its chains and destroys its sets.
//
// # Reading the kernel back
//
// Read returns what the kernel holds of the dataplane, through the same
// handles Sync uses and without changing anything: the virtual servers it
// owns with their real servers, weights, scheduler, flags and persistence
// timeout, the addresses on its link, its ipsets' members and its chains
// with the rules that hook them in. Reading.Trace follows a packet
// through that reading as the kernel does (nat hooks, filter INPUT, IPVS
// for local destinations, nat POSTROUTING) and answers in State.Lookup's
// shape, so that package troubleshoot (its IPVS Kernel) compares it with
// the model: a real server deleted by hand, an address unbound, a flushed
// chain or a virtual server the model no longer has show as drift. The
// kernel holds no service names, so Trace takes a Namer. Nothing of other
// programs is read; a rule of theirs that decides first is not seen.
//
// # Without a kernel
//
// New needs the kernel's IPVS (Probe tells whether there is one:
// github.com/moby/ipvs silently does nothing without the ip_vs module).
// FakeIPVS and FakeNetlink stand in for both handles, with an
// iptables.FakeRunner for the rules: the fakes answer as the kernel does,
// count every call (one netlink round trip each) and let a test set a
// real server's connection counts.
//
// # Differences from kube-proxy's iptables mode
//
// IPVS mode differs from the semantics State.Lookup specifies where
// kube-proxy's own IPVS mode does, by design:
//
//   - Service addresses are local addresses of the node, so a port no
//     service serves on them is refused by the node's stack rather than
//     passed on.
//   - Node ports are served only on the addresses NodePortAddresses
//     selects, never on loopback (no localhost node ports); elsewhere the
//     node's stack answers.
//   - externalTrafficPolicy Local applies to traffic from pods and from
//     the node too (IPVS sees no source before choosing a real server):
//     they reach the local endpoints, or are dropped when there are none.
//     Unlike kube-proxy (which then uses every endpoint), a Local policy
//     without local endpoints drops, as the Service API says.
//
// The conformance tests run the shared suite without exactly those cases.
package ipvs
