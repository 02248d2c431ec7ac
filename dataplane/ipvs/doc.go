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
// ports, on each of the node's addresses, as kube-proxy's IPVS mode picks
// them: the addresses the kernel has on every link but the dummy link,
// loopback ones never (IPVS cannot serve them); all of them (IPv6
// link-local ones aside) when Settings.NodePortAddresses is empty or holds
// a /0 of the family, else those its CIDRs hold. The Node object's
// addresses do not count: a second NIC's address serves node ports too.
// Health-check node ports are accepted on every one of the node's
// addresses (IPv6 link-local ones aside, as kube-proxy leaves them out of
// the node's addresses: the one each new pod's veth brings is no change)
// and on loopback. Each has the Config's scheduler and
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
// One chain holds rules per service: PKV-INTERNAL, where PKV-SERVICES
// sends traffic from the node (source type LOCAL) and from local pods (as
// the local-traffic detector tells them) to the external destinations of
// externalTrafficPolicy Local services (EXTERNAL-LOCAL, NODE-PORT-LOCAL).
// Its rules DNAT each such external IP, VIP and node port to the service's
// cluster IP, whose virtual server has every endpoint, before IPVS sees
// the packet: internal traffic reaches the whole service, as the Service
// API and State.Lookup say, while outside traffic meets the external
// virtual server (local endpoints only) or the DROP set, as before. A VIP
// with loadBalancerSourceRanges is redirected only for the sources they
// admit. The chain changes only when such a destination comes or goes.
//
// # Syncs that cost what changed
//
// A Sync passes through three stages, a file each. The desired table
// (desired.go) is what the State needs, service by service: a Sync brings
// it to the new State by recomputing only the services
// State.ChangedFrom names, whatever kind of Sync it is; only a State that
// cannot say what changed (a first one, a node change that touches every
// service) or new node addresses rebuild it. The difference (diff.go)
// from what is programmed comes, for a partial Sync, from the desired
// table's own change, without reading the kernel; the apply stage
// (apply.go) makes one call per difference.
//
// The first Sync, a Sync after a failure, one whose State cannot say
// what changed and one whose settings changed the rules are full: they
// compare the whole desired table with one reading of the kernel (one
// dump of the family's addresses, one listing per ipset, one dump of the
// virtual servers and, unless that dump leaves every virtual server to
// create or fix, one read of /proc/net/ip_vs), so that a restarted
// dataplane changes nothing that is right. They compare fingerprints first, kept as the desired table
// changes: of each set's members, of the addresses on the link, of the
// virtual servers' options and of the table's lines (fingerprint.go), and
// member by member only where one differs; of the virtual servers only
// those whose fingerprint differs get a dump of their real servers.
// Every other Sync looks only at the services State.ChangedFrom names,
// and of their virtual servers only at those whose options or endpoints
// changed: one dump of its real servers and one call per difference,
// plus one restore of PKV-INTERNAL when its rules changed. It reads no
// addresses (a dump lists every address bound to the link, one per
// service): the node's addresses of the last full sync serve, and the
// canary notices when they change.
//
// # Cost model
//
// What each kind of Sync costs at 10,000 ClusterIP services (a quarter
// NodePort, on a node with two addresses) × 10 endpoints, measured on
// package ipvstest's fakes (BenchmarkSyncFirst, BenchmarkSyncEndpointChange,
// BenchmarkSyncForcedFull, BenchmarkSyncIdle; the fakes' own work
// counted, the State's Build not): calls to the kernel (IPVS, link and
// ipset netlink round trips, and reads of the table), and what the Sync
// allocates.
//
//	                      calls  objects  allocated
//	first sync          300,029     213k      87 MB
//	one-endpoint change       3       36     4.8 KB
//	forced full resync       25    15.5k      45 MB
//	idle resync               0        8      328 B
//
// A first sync is one call per virtual server, real server, address and
// set member; a change costs what changed, the same at 1,000 services
// (36 objects; TestChangeAllocationsFlat holds it, TestCallsPerChange the
// calls: 3 to remove an endpoint of a ClusterIP service, 11 to move one of
// a NodePort service); a forced full resync after a failed one-endpoint
// change reads the kernel once (16 calls, the table's read included;
// most of its bytes are the fakes' listings of 110,000 set members and of
// the table) and repairs what differs (here a NodePort service's three
// virtual servers: a dump of the real servers, a deletion and an addition
// each), as a Reconcile of an untouched kernel reads it and changes
// nothing; an idle resync makes no call (TestIdleAndChangeCalls). The
// bench module's TestCost, which CI runs, holds these figures for every
// mode (State's Build included). Timed through a real IPVS kernel in the test
// VM (BenchmarkKernelSync; qemu without KVM, so every figure is several
// times a real machine's): a first full sync of 1,000 services of 10
// endpoints takes 10 s, of 10,000 services 232 s, nearly all of it the
// kernel's answers to its calls. bench/ sets the dataplane's compute
// beside the other dataplanes' and kube-proxy's IPVS proxier's on the
// same workloads.
//
// # The canary
//
// The Dataplane is a dataplane.Reconciler and a dataplane.KernelWatcher.
// KernelChanged dumps the family's addresses once and reports a change
// when the node gained or lost an address that serves node ports or
// accepts health checks, when an address the dataplane bound is gone from
// its link, or when the link is gone. It then reads /proc/net/ip_vs once
// and compares the fingerprint of the dataplane's virtual servers and
// their real servers in it (without the connection counters traffic
// moves) with the one the desired table says they have: a virtual or
// real server deleted, added or changed, or "ipvsadm -C", is seen without
// a netlink dump per virtual server, and is reported until a Sync or
// Reconcile repairs it, whenever it was made (a change of a persistence
// timeout alone, which the table gives in the kernel's jiffies, is left
// to the periodic Reconcile). It lists each of its ipsets and compares
// the members with those it programmed, and, when the iptables backend
// numbers its changes (nft), fingerprints its chains and their jumps over
// netlink only when the number moved (no iptables-save: a poll costs
// milliseconds, not the processes that under emulation took a second and
// made the proxy space its polls nine times that). A sync that finds the
// rules' fingerprint moved by someone else and does not rewrite them
// leaves it for the canary to report. The proxy then reconciles, which
// programs node ports on the new addresses and deletes those on the gone
// ones. No Sync reads the table but a full one: the fingerprints it is
// compared with are the desired table's.
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
// unhooks and deletes its chains and destroys its sets. With iptables-nft
// it also deletes the built-in chains it jumped from, and their tables,
// where nothing else is left in them (xtables.RemoveEmptyHooks): an empty
// hooked nat chain would keep conntrack NAT-tracking every flow.
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
// shape. The kernel holds no service names, so Trace takes a Namer;
// NewNamedReading names the frontends after the model's service ports and
// puts the other programs' iptables rules first (NamedReading.Others, whose
// "-m set" matches follow ReadIPSets), so that package troubleshoot
// compares it with the model: a real server deleted by hand, an address
// unbound, a flushed chain or a virtual server the model no longer has
// show as drift. Read reads nothing of other programs.
//
// # Without a kernel
//
// New needs the kernel's IPVS (Probe tells whether there is one:
// github.com/moby/ipvs silently does nothing without the ip_vs module).
// OpenKernel opens only the netlink families the dataplane uses, route
// and netfilter, so a node without xfrm_user (say) runs it. The modules it
// needs are ip_vs (and the scheduler's, ip_vs_rr by default), ip_set with
// ip_set_hash_ip, ip_set_hash_ipport, ip_set_hash_ipportip and
// ip_set_hash_ipportnet, dummy and, for the rules, xt_set; an error for a
// missing one names it with the modprobe line that loads it. The
// conntrack cleanup the proxykit package runs after syncs needs
// nf_conntrack_netlink. Config.Kernel says where to program: OpenKernel's
// (the default) or package ipvstest's Kernel of fakes, which with an
// xtables.FakeRunner for the rules runs without a kernel: its fakes answer
// as the kernel does, count every call (one netlink round trip each) and
// let a test set a real server's connection counts and the node's
// addresses, which node ports follow.
//
// # Differences from kube-proxy's iptables mode
//
// IPVS mode differs from iptables mode where kube-proxy's own IPVS mode
// does, by design; State.LookupMode(dataplane.ModeIPVS, p) is the
// executable statement of them, and the conformance tests (fakes and
// kernel) hold every scenario case to it:
//
//   - Service addresses are local addresses of the node, so a port no
//     service serves on them is refused by the node's stack (a Reject)
//     rather than passed on.
//   - Node ports are served only on the addresses NodePortAddresses
//     selects, never on loopback (no localhost node ports); elsewhere the
//     node's stack answers, and node ports without endpoints are rejected
//     or dropped only where they are served.
//   - A service whose internal and external traffic policies are both
//     Local: internal traffic to its external destinations goes to its
//     cluster IP's virtual server, so reaches the local endpoints only
//     (and is dropped without any), where iptables mode has it reach every
//     endpoint. With an externalTrafficPolicy Local alone, internal
//     traffic reaches every endpoint, as in iptables mode and unlike
//     kube-proxy's IPVS mode (whose virtual server has only the local
//     endpoints when there are some); outside traffic reaches the local
//     endpoints, or is dropped without any, as the Service API says
//     (kube-proxy then sends it to every endpoint).
package ipvs
