// Package userspace is the userspace dataplane, kube-proxy's fourth mode:
// every service frontend is served by a Go forwarder that accepts the
// client's connection and opens its own to an endpoint. It runs where
// netfilter is absent or forbidden (no root, sandboxed runtimes, CI, a
// laptop, a program embedding a cluster's services) and, with root, can
// catch a node's service traffic as the other modes do.
//
// # Two ways to catch traffic
//
// Unprivileged mode (the zero Config) listens on addresses the caller
// chooses: Config.Listen maps each Destination (a cluster IP, external IP or
// LoadBalancer VIP with its port, or a node port) to a local address, such
// as a free loopback port, and Dataplane.Listeners says where each ended
// up. Without Listen a forwarder listens on the service address itself,
// which the caller must then hold (on a dummy interface, say); node ports
// listen on every address. No root and no netfilter are needed.
//
// Redirect mode (Config.Redirect) needs root and serves a node's service
// traffic as the other modes do: every forwarder listens on a free port,
// with a transparent socket (IP_TRANSPARENT), a service address's
// forwarder on loopback and also on that address and port itself, a node
// port's on every address, and netfilter rules, written with xtables'
// Runner (one iptables-restore per Sync), send each frontend's traffic
// there:
//
//   - Traffic entering the node (from pods, whatever the shape of their
//     network, and from outside) to a service address is diverted by
//     mangle TPROXY rules (chain PKU-TPROXY, hooked from PREROUTING), which
//     hand the packet, not rewritten, to the forwarder's socket on the
//     service address and mark it; a policy route (a routing rule for the
//     mark, RedirectConfig.TProxyMark, to a table, RouteTable, holding one
//     local route through the loopback device) delivers marked packets to
//     the node, made over rtnetlink. The accepted connection still says
//     where the client sent it, and a UDP reply leaves from the address
//     and port the client sent to. On a bridge whose traffic crosses
//     iptables (br_netfilter), PREROUTING runs while the bridge forwards
//     the frame, and the IP stack later drops the socket TPROXY chose; the
//     mark stays, and the socket bound to the packet's own destination is
//     found all the same.
//   - The node's own traffic to a service address is redirected by nat
//     REDIRECT rules (PKU-SERVICES, hooked from OUTPUT) to the forwarder on
//     loopback (127.0.0.1, ::1), where REDIRECT sends a packet of the node.
//   - A node port's destination is already the node's: nat DNAT rules that
//     change only the port (PKU-NODEPORTS, hooked from PREROUTING and, for
//     local destinations, from PKU-SERVICES) send it to the forwarder on
//     the address it reached, on NodePortAddresses of the node.
//   - A forwarder's own port takes nothing else: filter PKU-FORWARDERS,
//     hooked from INPUT for a connection's first packet, lets through
//     what a REDIRECT or DNAT sent (conntrack's DNAT state) and refuses
//     any other new connection to a forwarder's port as the kernel does
//     where nothing listens (a TCP reset, an ICMP port unreachable).
//   - What the model drops is dropped ahead of all that (mangle
//     PKU-FIREWALL, hooked from PREROUTING and OUTPUT): packets to a
//     cluster IP whose internal traffic policy finds no local endpoint,
//     external packets to a frontend whose external traffic policy finds
//     none, packets to a LoadBalancer VIP from outside its source ranges.
//     The client sees a drop, not a connection that never answers.
//   - A destination whose service has no endpoints gets a filter REJECT
//     (PKU-REJECT, hooked from INPUT, FORWARD and OUTPUT).
//
// Why TPROXY, not REDIRECT, for the traffic entering the node: REDIRECT
// rewrites a packet's destination to the first address of the interface it
// came in on, and drops it when that interface has none, as the host side
// of a pod's veth has none on routed pod networks (Calico's, and Cilium's
// and kube-router's routed modes: pods reached through /32 routes). TPROXY
// needs no address, keeps no NAT state for the connection, and leaves the
// original destination on the socket; upstream's userspace proxier used
// REDIRECT and served only pods behind a bridge that has an address.
//
// # Nothing to reach but the frontends
//
// A forwarder's port is an implementation detail: a connection made to it
// directly (an outside client probing the node, a pod) would reach the
// service past every rule, even a service that is only a cluster IP, and
// past its drops (traffic policies, source ranges). So the forwarders are
// placed where only the rules reach them. A service address's socket for
// the node's own traffic listens on loopback, which no packet from
// another host reaches (unless something set IPv4's route_localnet; this
// mode never does), and its socket for the traffic entering the node on
// the service address and port itself: that is the frontend, which
// TPROXY hands it. There is nothing else to reach, even with the rules
// flushed. A node port's forwarder must listen on the node's addresses,
// since a DNAT that keeps the address is the only redirect that works
// from every interface, pods behind an address-less veth or a
// br_netfilter bridge included (TPROXY to a loopback socket loses the
// socket it chose on such a bridge, as described above, and REDIRECT or
// a DNAT to loopback needs route_localnet in IPv4 and cannot work in
// IPv6): there the guard chain refuses what no DNAT sent. It guards the
// loopback sockets too, for a node where route_localnet is set. Until
// the canary or a Reconcile finds a flushed guard chain and writes it
// again, a node port's forwarder answers on its own port.
//
// kube-proxy (v1.37) opens, besides its netlink sockets: its health
// server (--healthz-bind-address, 0.0.0.0:10256 by default), its metrics
// server (--metrics-bind-address, 127.0.0.1:10249) and the health-check
// node port of each externalTrafficPolicy Local LoadBalancer service; it
// holds no socket on a node port. A node running redirect mode opens
// those (the embedding program's, package health) and, on the node's
// addresses, nothing else that answers: its sockets on service addresses
// are the frontends, its loopback ones are not reached from outside, and
// its node port ones answer only through a node port.
//
// The Dataplane is then a dataplane.Reconciler (it lists its chains,
// compares them with their listing right after its last write and looks
// for the jumps and the policy route) and a dataplane.KernelWatcher: it
// reads the rules' generation (xtables.GenerationOf: the nftables ruleset
// generation with the nft backend of iptables, a fingerprint of the
// tables' summaries with legacy) and compares every chain and jump as
// Reconcile does only when someone else moved it; with a Runner that has
// none, the chains PKU-SERVICES and PKU-TPROXY are its canary; the policy
// route is checked every time. A
// write of a few rules first makes sure nobody else changed the chains
// since they were last seen (the same generation, or a listing): if
// someone did, it writes them whole, so that the listing after it never
// takes a foreign change for the Dataplane's own.
// Cleanup removes the chains, the jumps, the routing rule and the route,
// and with iptables-nft the built-in chains the jumps were in, and their
// tables, where nothing else is left in them (xtables.RemoveEmptyHooks):
// nothing that holds another program's rule or chain. The kernel keeps
// for a minute the TIME_WAIT state of the connections a forwarder closed
// first, under the service address the client reached: until it expires,
// a new connection from the same client address and port to that address
// (a one in tens of thousands chance per connection) is not forwarded, as
// a packet of a local socket never is; the same holds for a service
// address that loses its last endpoint.
//
// # Where connections go
//
// A connection is routed as State.LookupMode(dataplane.ModeUserspace)
// specifies, from what the forwarder knows: the destination it was caught
// for and the client's address. The client is the node itself when its address is loopback,
// one of the State's Node.IPs or any other address the node holds (a
// second NIC's, say), as kube-proxy's rules take every source of address
// type LOCAL for the node, where State.Lookup knows only Node.IPs; the
// node's connections to an externalTrafficPolicy Local frontend reach
// every endpoint, as a pod's do. The node's addresses are the family's in
// the kernel, read over rtnetlink in the network namespace of the first
// Sync and read again whenever one is added or removed;
// Config.LocalAddresses replaces them. Endpoint choice is State.Select's
// (readiness, the terminating fallback, traffic policies, topology); the
// candidates are taken in turn (Config.Balance, or at random), and
// ClientIP affinity pins a client's address to the endpoint it first
// reached until the service's timeout passes without a new connection. A
// failed dial tries up to three endpoints, forgetting the pin to the one
// that failed.
//
// A frontend whose service has no endpoints holds no socket in
// unprivileged mode, so that the kernel refuses its connections at once
// (a TCP reset, an ICMP port unreachable), as kube-proxy's REJECT does.
// In unprivileged mode a connection that policy drops (traffic policy
// Local without a local endpoint, a source outside
// loadBalancerSourceRanges) is accepted and never answered, as a userspace
// proxy completes the TCP handshake before it can decide; a dropped
// datagram is ignored. Redirect mode drops those in the kernel, before
// the handshake, except at a destination several service ports claim
// (two services sharing an external IP and port), where the forwarder
// decides as in unprivileged mode.
//
// # Syncs that cost what changed
//
// Sync looks only at the services State.ChangedSince names (all of them
// when it cannot tell, or when the node or settings changed), and of those
// only at ports whose ServicePort or endpoint list is a new pointer. A
// changed port gets a new routing view; its sockets stay open, and nothing
// of another service is touched, nor are its redirect rules rewritten
// unless a destination gains or loses its endpoints. Connections to an
// endpoint that is no longer a candidate drain: they go on for
// Config.DrainTimeout, then are closed; new connections never reach it. A
// UDP session to it ends at once, as kube-proxy clears its conntrack
// entries. A removed service closes its sockets at once and its
// connections after DrainTimeout. A frontend that cannot listen (the
// address is not local, the port taken) is returned in a *BindError,
// counted, logged once and retried every Config.BindRetryPeriod and at
// every Sync; everything else of the Sync is applied.
//
// # Cost model
//
// What each kind of Sync costs at 10,000 ClusterIP services × 10
// endpoints, measured in unprivileged mode with every frontend left
// unserved (Config.Listen false), so that no socket is opened: what the
// Build of the State and the Sync allocate (for a change, the Builder's
// update too). A frontend's socket is opened when it first has endpoints
// and closed when it has none left or goes, never on a change of its
// endpoints; there is no other kernel call. Unprivileged mode has no
// write to fail, so its full sync is the one after a change of the node
// (its zone here) or the settings.
//
//	                      objects  allocated
//	first sync               1.55M     122 MB
//	one-endpoint change         59      14 KB
//	full sync                90.2k      23 MB
//	idle resync                 27     1.7 KB
//
// A change costs the same whatever the cluster's size (at 1,000 services:
// 57 objects, 12 KB). Redirect mode adds one iptables-restore to a Sync
// whose destinations gained or lost their endpoints (all its rules in a
// full one), none to an endpoint change. These figures are promises that
// fail a check: TestCost in the bench module (which CI runs; "cd bench &&
// go test -run TestCost -v ." prints them) fails when a change allocates
// more at 10k services than 1.25 times its allocations at 1k plus 25
// objects (or 4 KiB), or a first, full or idle sync at 10k more than 2.3M,
// 140k or 60 objects (the first two more than 185 or 34 MB).
//
// # The data path
//
// TCP is copied with io.Copy between two *net.TCPConn, which splices in
// the kernel without copying through user memory. A splice holds a pipe
// (the runtime's, of 1 MiB) while it runs, so each is cut to a burst of
// 100 ms, and between bursts the forwarder waits for data holding none:
// an idle connection holds its two sockets and two goroutines. Each
// proxied socket's send buffer is sized by the round-trip time of its
// handshake, 4 KiB per µs (4 GB/s) and at least 128 KiB, and left to the
// kernel's autotuning from 4 MiB up: that autotuning grows with the
// congestion window, which on a loss-free path to a pod of the node grows
// without bound, so a splice, which copies nothing, queued megabytes
// ahead of a slower reader, and the path spent more CPU per byte (see
// "Measured"). A client's half-close is passed on to the endpoint and
// back; a connection through which nothing moved for
// Config.TCPIdleTimeout is closed. UDP keeps one session per client
// address, a socket connected to its endpoint that is closed after
// Config.UDPIdleTimeout without a datagram either way. Each service port
// admits at most Config.MaxConnections connections and sessions; more are
// reset. Cleanup closes every socket and connection and returns once
// every goroutine of the Dataplane has ended.
//
// # Measured
//
// Benchmarks in bench_test.go, whose load generator runs in the test
// process, in two labs: loopback, and what a node sees (a client and a
// server namespace, each joined by a veth to a node namespace that runs
// the proxy; "direct" is the same path routed through the node). Each
// alternates direct and proxied rounds within one run; a ratio is the
// median of its rounds'. In one run on a shared 2-vCPU VM (AMD EPYC) with
// a load average near 1: a 64 MiB transfer on a new connection went
// through the proxy at 0.81 of direct on loopback (3969 vs 4814 MB/s; CPU
// per MiB of the whole process 457 vs 330 µs) and at 1.04 between
// namespaces (2288 vs 2256 MB/s; 705 vs 561 µs: the proxy splits the
// path's kernel work over both CPUs); a second run gave 0.85 and 1.07,
// earlier ones 0.74 to 0.89 and 0.96 to 1.12. A 64-byte request/response
// (20,000 round trips each way) added 17 µs at the median and 24 to 32 µs
// at p99 on loopback (33 vs 17 µs, 67 to 86 vs 42 to 53 µs), 20 to 21 µs
// and 28 to 44 µs between namespaces, in three runs. 10k idle connections
// held 8.0 KiB of Go heap and stacks and 2 goroutines each, plus their two
// sockets in the kernel.
//
// The choices, each from one run of the transfer alternating forwarders
// built both ways (medians of the rounds' ratios, loopback then veths):
// without the send buffer sizing, CPU per MiB was 1.70x and 1.21x and
// throughput 0.56x and 0.85x; a user-space copy through a 1 MiB buffer
// instead of splice, 1.20x and 1.05x CPU; bursts of 1 s instead of 100
// ms, and GOMAXPROCS 1 or 4 instead of 2, changed nothing beyond the
// noise (two identical forwarders differ by up to 2% in CPU and 16% in
// throughput). Under the machine's usual load (a load average of 10 to
// 18: other sessions' builds and VMs), runs of one long connection per
// forwarder gave 0.50 to 0.60 of direct on loopback and 0.74 to 0.84
// between namespaces with the sizing (its CPU per MiB 0.73x to 0.91x),
// 0.37 to 0.44 and 0.53 to 0.71 without; p99 round trips took 1.5 to 3.4
// ms through the proxy against 0.25 to 0.46 ms direct: every hop through
// it is one more thread waiting for a CPU.
//
// # Reading it back
//
// Troubleshooting (package troubleshoot) compares what the Dataplane does
// with the model through two readings. Dataplane.ListeningFrontends is the
// in-process one: the frontends its forwarders listen for, which
// troubleshoot.VerifyListeners checks against the model's. Reading is the
// kernel's, in redirect mode: the rules as iptables-save lists them
// (xtables.Reading, everyone's), traced to the forwarder each one leads
// to, which routes as the model does; where no socket listens
// (Reading.Listening, as ListeningSockets answers from the node's socket
// listing), the kernel drops a TPROXY's packet and refuses a redirected
// connection.
//
// # Metrics
//
// Given a Config.Registerer, a Dataplane exports under
// Config.MetricsNamespace ("proxykit" by default), per service port
// (labels ip_family, service "ns/name:port", protocol):
//
//   - proxykit_userspace_active_connections: open TCP connections and UDP
//     sessions;
//   - proxykit_userspace_accepted_total: connections and sessions
//     forwarded to an endpoint;
//   - proxykit_userspace_dial_failures_total: failed connects to an
//     endpoint;
//   - proxykit_userspace_bytes_total{direction="to_endpoint"|"to_client"};
//   - proxykit_userspace_refused_total{reason="no_endpoints"|"dropped"|"limit"};
//
// and per family proxykit_userspace_bind_failures_total and
// proxykit_userspace_unbound_frontends (waiting for a retry).
//
// # Differences from kube-proxy
//
// State.LookupMode(dataplane.ModeUserspace, p) is the executable statement
// of the first three, and the conformance tests (unprivileged and kernel)
// hold every scenario case to it:
//
//   - Every connection reaches its endpoint from the proxy's own address:
//     the client's address is never kept, whatever the traffic policy
//     says (upstream's userspace proxier did the same).
//   - SCTP is not served: Go's net package has no SCTP sockets. SCTP
//     frontends are logged once and left alone.
//   - Health-check node ports need no firewall opening: there is none.
//   - A UDP datagram that would be rejected while its destination's socket
//     is open for another client is dropped (a bound socket cannot answer
//     one client with an ICMP error).
//   - The interface-based local-traffic detectors learn a connection's
//     interface from the route back to its source, through netlink in the
//     network namespace of the Sync that configured them.
package userspace
