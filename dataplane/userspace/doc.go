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
// chooses: Config.Listen maps each Frontend (a cluster IP, external IP or
// LoadBalancer VIP with its port, or a node port) to a local address, such
// as a free loopback port, and Dataplane.Listeners says where each ended
// up. Without Listen a forwarder listens on the service address itself,
// which the caller must then hold (on a dummy interface, say); node ports
// listen on every address. No root and no netfilter are needed.
//
// Redirect mode (Config.Redirect) needs root and serves a node's service
// traffic as the other modes do: every forwarder listens on a free port of
// every address, with a transparent socket (IP_TRANSPARENT), and netfilter
// rules, written with the iptables package's Runner (one iptables-restore
// per Sync), send each frontend's traffic there:
//
//   - Traffic entering the node (from pods, whatever the shape of their
//     network, and from outside) to a service address is diverted by
//     mangle TPROXY rules (chain PKU-TPROXY, hooked from PREROUTING), which
//     hand the packet to the forwarder's socket without rewriting it and
//     mark it; a policy route (a routing rule for the mark, RedirectConfig.
//     TProxyMark, to a table, RouteTable, holding one local route through
//     the loopback device) delivers marked packets to the node, made over
//     rtnetlink. The accepted connection still says where the client sent
//     it, and a UDP service's replies leave from a second transparent
//     socket bound to the service address and port itself.
//   - The node's own traffic to a service address is redirected by nat
//     REDIRECT rules (PKU-SERVICES, hooked from OUTPUT) to the forwarder on
//     loopback.
//   - A node port's destination is already the node's: nat DNAT rules that
//     change only the port (PKU-NODEPORTS, hooked from PREROUTING and, for
//     local destinations, from PKU-SERVICES) send it to the forwarder on
//     the address it reached, on NodePortAddresses of the node.
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
// The Dataplane is then a dataplane.Reconciler (it lists its chains,
// compares them with their listing right after its last write and looks
// for the jumps and the policy route) and a dataplane.KernelWatcher (the
// chains PKU-SERVICES and PKU-TPROXY and the policy route are its canary).
// Cleanup removes the chains, the jumps, the routing rule and the route,
// and nothing else.
//
// # Where connections go
//
// A connection is routed as State.Lookup specifies, from what the
// forwarder knows: the destination it was caught for and the client's
// address. Endpoint choice is State.Select's (readiness, the terminating
// fallback, traffic policies, topology); the candidates are taken in turn
// (Config.Balance, or at random), and ClientIP affinity pins a client's
// address to the endpoint it first reached until the service's timeout
// passes without a new connection. A failed dial tries up to three
// endpoints, forgetting the pin to the one that failed.
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
// # The data path
//
// TCP is copied with io.Copy between two *net.TCPConn, which splices in
// the kernel without copying through user memory. A splice holds a pipe
// while it runs, so each is cut to a burst of 100 ms, and between bursts
// the forwarder waits for data holding none: an idle connection holds its
// two sockets and two goroutines. A client's half-close is passed on to
// the endpoint and back; a connection through which nothing moved for
// Config.TCPIdleTimeout is closed. UDP keeps one session per client
// address, a socket connected to its endpoint that is closed after
// Config.UDPIdleTimeout without a datagram either way. Each service port
// admits at most Config.MaxConnections connections and sessions; more are
// reset. Cleanup closes every socket and connection and returns once
// every goroutine of the Dataplane has ended.
//
// # Measured
//
// On loopback, in one run on a shared 2-vCPU machine with a load average
// near 8 (benchmarks in bench_test.go, whose load generator runs in the
// test): one long TCP transfer went through the proxy at 0.34 of the
// throughput of a direct connection (589 vs 1733 MB/s; the proxy's extra
// two TCP stacks compete with client and server for two CPUs, and other
// runs here gave 0.47 to 0.62). The CPU time says why (the whole process,
// per MiB, BenchmarkTransfer's cpu-µs/MiB): 320 to 400 µs direct, 900 to
// 1080 µs through the proxy, of which the proxy's splices are about 15%
// in a profile; the rest is the second loopback TCP connection every
// proxy that terminates TCP adds, its send and receive paths in the
// kernel. A 256 KiB user-space copy instead of splice cost the same CPU
// per MiB (920 to 990 µs) within the noise, so the zero-copy path stays:
// it moves no bytes through the Go heap. A 64-byte request/response on one
// connection took 17 µs more at the median (32.5 vs 15.6 µs) and 291 µs
// more at p99 (357 vs 66 µs); 10k idle connections held 8.0 KiB of Go
// heap and stacks and 2 goroutines each, plus their two sockets in the
// kernel.
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
//   - Every connection reaches its endpoint from the proxy's own address:
//     the client's address is never kept, whatever the traffic policy
//     says (upstream's userspace proxier did the same).
//   - SCTP is not served: Go's net package has no SCTP sockets. SCTP
//     frontends are logged once and left alone.
//   - A UDP datagram that would be rejected while its destination's socket
//     is open for another client is dropped (a bound socket cannot answer
//     one client with an ICMP error).
//   - The interface-based local-traffic detectors learn a connection's
//     interface from the route back to its source, through netlink in the
//     network namespace of the Sync that configured them.
//   - Health-check node ports need no firewall opening: there is none.
package userspace
