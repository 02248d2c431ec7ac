// Package nftables is the nftables dataplane: it turns a dataplane.State
// into one nftables table per IP family ("ip proxykit", "ip6 proxykit"),
// programmed over netlink (or through a knftables.Interface given as
// Config.NFT), following
// kube-proxy's nftables mode (v1.37): dispatch through verdict maps keyed by
// destination address, protocol and port (ClusterIPs, external IPs,
// LoadBalancer VIPs) and by protocol and port (node ports), endpoint
// choice by "numgen random mod N" into shared endpoint maps (a chain per
// endpoint only for ClientIP affinity, which remembers clients in dynamic
// sets with timeouts; no chain of its own for a simple ClusterIP port),
// loadBalancerSourceRanges in a firewall map checked before DNAT, reject
// and drop verdict maps for ports without (local) endpoints, one global
// hairpin set and one global ClusterIP masquerade rule, the drop of new
// connections to addresses in the cluster's ServiceCIDRs that no service
// has (State.ServiceCIDRs), --masquerade-all,
// the four local-traffic detectors, and node port addresses. Which
// endpoints serve which traffic is asked of State.Select; nothing here
// re-decides it.
//
// # Namespace
//
// The dataplane owns its table and nothing else: Cleanup deletes it, and
// no other table is read or written, so it runs beside kube-proxy's
// "kube-proxy" table, firewalld or anything else. Its base chains hook in
// at kube-proxy's priorities (dstnat-10 for the source-range firewall,
// dstnat and srcnat for NAT, filter for the reject checks). Fixed chains,
// sets and maps have kube-proxy's names; per-service chains are
// "service-", "local-", "external-", "firewall-", "endpoint-" and
// "unserved-" followed by a hash and "namespace/name/protocol/port" (cut
// to fit, as kube-proxy's, after an endpoint's address), so every name of
// a service holds a '/' and no fixed name does. Element comments name the
// port as "namespace/name/protocol/port" too, but nft holds 128 bytes of a
// comment and the API server's names make up to 196: a port whose name
// does not fit is kept out of the shared chains below, and its
// no-endpoint elements go to its "unserved-" chain (whose one rule drops
// or rejects) rather than straight to the verdict, so that a chain's name
// always says which port a packet met, for Trace and troubleshooting
// alike (kube-proxy cuts such comments and names no port). The chains and
// maps that simple ports share are "cluster-dnat-<protocol>-<shard>-<N>" and
// "cluster-endpoints-<protocol>-<shard>", the endpoint maps of the others
// "dnat-<protocol>-<shard>".
//
// # Table layout: shared chains for simple ports
//
// Every nftables commit visits every chain of every table in the
// namespace, whatever the transaction holds (about 17 ns a chain warm, 45
// cold), so a chain per service port would put 2 to 4.5 ms under every
// commit at 100,000 services. A simple port, a ClusterIP port without
// external IPs, node ports, LoadBalancer VIPs, ClientIP affinity or an
// internal traffic policy Local, therefore has no chain of its own: it
// needs nothing but a choice among its cluster endpoints (the
// masquerading of ClusterIP traffic and of hairpins is the fixed chains',
// for every port). Its service-ips element, commented with the port,
// goes to the chain shared by every simple port of its protocol, shard
// and endpoint count N, "cluster-dnat-tcp-1a-3", whose one rule is
// "dnat ip addr . port to ip daddr . tcp dport . numgen random mod 3 map
// @cluster-endpoints-tcp-1a"; the port's endpoints are the elements
// "<cluster IP> . <port> . <i> : <endpoint address> . <endpoint port>" of
// that map, one of 64 per protocol chosen by a hash of the cluster IP and
// port (one map holding every endpoint makes the kernel's insertions grow
// faster than the map within one transaction). The table thus holds one
// chain per shard and endpoint count in use (64 at 100,000 services of
// ten endpoints), not one per port. An endpoint change writes only the
// elements whose endpoint changed, and a change of the endpoint count the
// port's service-ips element too, which moves it to another shared
// chain: a rule is written only when no port of that shard had that
// count, and a shared chain nothing goes to any more is flushed and
// deleted later, as a service's. Of several ports claiming one cluster IP
// and port, the winner's endpoints are the ones in the map.
//
// # Endpoint maps of the other ports
//
// A port with a chain of its own and endpoints (one or more, and no
// affinity) has one rule there,
// "meta l4proto tcp dnat ip addr . port to numgen random mod N offset K
// map @dnat-tcp-3af". Its endpoints are elements K to K+N-1 of a named map
// shared with other ports: one of 1,024 maps per protocol, chosen by a
// hash of the chain's name, in which the port holds a slot of 65,536 keys
// (K is the slot times 65,536, so a port uses at most 65,536 endpoints).
// kube-proxy writes an anonymous map per port instead, and so did this
// package before v0.2.0: the kernel allocates and looks up anonymous sets
// by walking all the table's sets, so that loading 10,000 of them took
// three times as long as it does now, and the cost grew with the square
// of the number of services. A new port takes the lowest free slot of its
// map, so that equal States render equal scripts; the slot is also in the
// signature comment of the port's rule, so that a full sync after partial
// ones, or a restart, leaves every port where it is. An endpoint change
// writes only the elements whose endpoint changed, and the rule only when
// the number of endpoints changed: the kernel validates the whole table
// (every chain a jump reaches, through every element of every verdict
// map) in each transaction that adds a rule or a verdict map element,
// which at 10,000 services is nearly all such a transaction costs, and
// none in one that changes only these data elements. Maps nothing uses
// are deleted.
//
// # Where it differs from the iptables mode
//
// Where kube-proxy's nftables mode deliberately differs from its iptables
// mode, this dataplane follows nftables, and State.LookupMode with
// dataplane.ModeNFTables is its specification (the conformance suite
// checks it against that): a cluster IP's unserved ports are rejected;
// source ranges drop before DNAT, endpoints or not; node ports are never
// served on loopback, and those without endpoints are rejected only on the
// addresses that serve node ports; health-check node ports get no accept
// rule; hairpin masquerading covers local endpoints only. kube-proxy also
// defaults --nodeport-addresses to the node's primary IPs in this mode;
// that is the caller's Settings.NodePortPrimary (the node agent sets it).
//
// # Syncs that cost what changed
//
// The dataplane keeps in memory what the table holds: every service's
// rendering (its chains with a signature of their rules, its affinity
// sets) and, for every set and map key, the service ports claiming it
// (when several claim one, the first by namespace, name, port and protocol
// wins, as in State.Lookup). A Sync asks State.ChangedSince which services
// changed and writes, in one transaction, only their differences: rewritten
// chains (flush and rules), element additions and deletions (a changed map
// value is a delete and an add, as nft refuses to re-add a key), new
// affinity sets. An idle resync sends nothing; a one-endpoint change is a
// few operations whatever the cluster's size: the endpoint map elements
// whose endpoint changed (those after a removed or added one in sorted
// order), and when their number changed the port's rule, or for a simple
// port its service-ips element. Chains nothing refers to
// any more are flushed at once and deleted by a later Sync, at least
// Config.StaleChainDelay later, in a transaction of their own: kernels
// before 6.2 release a map element's reference to a chain only after the
// transaction that deleted the element.
//
// The first Sync, the first after any failure, one after a change of the
// fixed part (node addresses, settings) and one per Config.FullSyncPeriod
// are full: every service is rendered (but those that did not change since
// the last sync, taken or not, whose renderings are reused: a forced full
// resync after a failure renders only what changed), the table is read
// back (through netlink by default: names, the rule count and first
// comment of every chain, the elements of the fixed
// sets and maps) and only what differs is written, besides the small fixed
// part. The first rule of every per-service chain carries its signature
// as a comment, which is how a listing (which shows comments, not rules)
// tells that a chain is already right; a restart therefore converges
// without rewriting what the previous run left in place. Endpoint maps are
// listed only when the Dataplane does not know what it wrote to them (its
// first sync, and the first after a failure): at 100,000 services they
// hold a million elements. Then every element is compared, and only those
// that differ written. Otherwise the elements of a port whose rule is
// right are what the Dataplane wrote, and those that changed since are
// written, as are those of the shared maps; a map holding a port whose
// chain is not right is flushed and refilled whole, as are the maps a
// rejected transaction wrote to (or would have), in case an element
// nobody expected made nft refuse it, and a shared map the Dataplane did
// not know the table had. A full sync larger than Config.MaxOperations is split into transactions ordered so
// that each refers only to what the earlier ones created.
//
// A transaction nftables rejects changes nothing (the kernel applies it
// whole or not at all); Sync returns a *TransactionError, counts it, and
// the next Sync is full.
//
// # Repairing what others change
//
// The Dataplane is a dataplane.Reconciler: Reconcile reads the table back
// as a full sync does and repairs, in one transaction, what differs from
// the last Sync (the fixed part whole when any of it differs); an
// untouched table costs the listing and no transaction. Like a full sync
// that knows what it wrote, it trusts the endpoint maps it knows of, so
// an element changed by hand is not seen (the node agent's verify, which
// traces the listing, sees it, and a restart repairs it).
//
// It is also a dataplane.KernelWatcher, whose KernelChanged is Reconcile
// without the repair: it reports a flushed or deleted table, a chain
// emptied or given a foreign rule, a set or map element gone or added.
// Where the kernel numbers its commits (nftables' ruleset generation,
// read over netlink) the table is read only when a transaction committed
// since it was last seen as programmed; otherwise every call reads it.
// kube-proxy's nftables mode has no canary.
//
// # Netlink
//
// Without Config.NFT the Dataplane talks to nftables over a netlink socket
// of its own (opened by New in the calling thread's network namespace), so
// that a sync starts no process and the host needs no nft binary. Every
// rule is compiled from the same nft text the nft path would run into the
// expressions nft 1.0.6 itself generates for it, and the table, sets and
// maps carry the user data nft writes: "nft list table" and "nft
// --debug=netlink list table" show a table written over netlink exactly as
// one written by nft -f (a kernel test checks it for every rule shape and
// every conformance scenario), and reading rules back turns the
// expressions into that text again. A failed commit changes nothing and
// names the refused operation in its error.
//
// # Without a kernel
//
// A knftables.NewFake given as Config.NFT runs the Dataplane without
// touching the kernel (the node agent's --dry-run prints each transaction
// applied to one). Render returns the exact nft -f script of a first full
// sync, deterministic for equal States. The tests trace packets through the
// fake's table and compare with State.LookupMode; the same conformance
// suite runs through a real kernel (dataplanetest/kerneltest), every case
// it can send becoming TCP or UDP connections in network namespaces.
// NewEncodeOnly runs the default netlink path up to the encoded batches
// and hands each to a function instead of a socket: what a sync costs in
// userspace, measured without a kernel (the bench's compute rows).
//
// # Metrics
//
// Given a Config.Registerer, a Dataplane exports, labelled ip_family and
// under Config.MetricsNamespace ("proxykit" by default):
//
//   - proxykit_nftables_sync_failures_total{sync="full"|"partial"}: the
//     transactions nftables rejected (kube-proxy's
//     sync_proxy_rules_nftables_sync_failures_total);
//   - proxykit_nftables_cleanup_failures_total: failed deletions of stale
//     chains (sync_proxy_rules_nftables_cleanup_failures_total);
//   - proxykit_nftables_objects{kind="element"|"chain"|"rule"}: what the
//     table holds after the last Sync;
//   - proxykit_nftables_sync_operations: a histogram of the operations
//     each Sync sent;
//   - proxykit_nftables_skipped_total: inputs left out as invalid.
//
// # Cost model
//
// What each kind of Sync costs at 10,000 ClusterIP services × 10
// endpoints, measured without a kernel (NewEncodeOnly, the bench module's
// compute rows): the netlink batches sent (one per transaction), what the
// Build of the State and the Sync allocate (for a change, the Builder's
// update too), and the batches' size. NewEncodeOnly's table holds no rules
// or elements, so its forced full resync writes them all; on a kernel
// that kept them a full sync also reads the table back and writes only
// what differs.
//
//	                      batches  objects  allocated  batch bytes
//	first sync                  1     224k      48 MB       5.2 MB
//	one-endpoint change         1      335      36 KB        536 B
//	forced full resync          1    32.4k      15 MB       5.2 MB
//	idle resync                 0      157      12 KB          0
//
// A change costs the same whatever the cluster's size (at 1,000 services:
// 334 objects, 34 KB); a forced full resync (here after one change) renders
// only what changed since the last sync. These figures are promises that
// fail a check: TestCost in the bench module (which CI runs; "cd bench &&
// go test -run TestCost -v ." prints them) fails when a change allocates
// more at 10k services than 1.25 times its allocations at 1k plus 25
// objects (or 4 KiB), or a first, forced full or idle sync at 10k more than
// 340k, 50k or 250 objects (the first two more than 72 or 23 MB).
//
// # Performance
//
// Measured on a shared 2-core VM with services of 10 endpoints
// (BenchmarkOneEndpointChange, BenchmarkIdleResync, BenchmarkFullSync,
// BenchmarkKernelFullSync; CPU seconds of the whole process):
//
//   - one-endpoint change: 2 to 6 operations and 0.1 to 0.6 ms of CPU at
//     1k, 10k and 100k services (flat); an idle resync: 0 operations, under
//     0.3 ms;
//   - full sync without a kernel (render, plan, transaction text): 0.03,
//     0.33 and 6.5 CPU-s at 1k, 10k and 100k services;
//   - a full sync renders its services on Config.RenderWorkers goroutines
//     (GOMAXPROCS, at most 4, by default) when it has at least 256 per
//     goroutine; the script is the same as one goroutine's;
//   - over netlink, each transaction is one batch of netlink messages,
//     byte for byte what nft 1.0.6 sends for the same script, built
//     without an nft process: a cold full sync into a real kernel at 10k
//     services (a 5 MB batch) takes about 0.26 s and at 100k (49 MB) about
//     3 s. A big transaction's trailing elements are encoded on two
//     goroutines. The commit of even one element grows with the
//     number of chains in the table, which simple ports no longer add to:
//     a one-endpoint change, compute and kernel, takes 0.2 to 0.3 ms at
//     10k services and 0.4 to 0.6 ms at 100k (BenchmarkKernelOneEndpointChange,
//     whose 100k table has 5,613 chains, most of them its node ports').
//     A change of a port's number of endpoints (a scale event), a new
//     service or a removed one writes a rule or a service-ips verdict
//     element, and the kernel then validates the whole table: 4.7 to 5 ms
//     at 10k services and 30 ms at 100k (BenchmarkKernelEndpointCountChange),
//     nearly all of it the kernel's. Only a data element escapes it, and
//     nft has no syntax for choosing a chain by a looked-up endpoint count
//     (a map lookup as a verdict map's key), so the table's legibility
//     rules that shape out.
//   - through nft (Config.NFT), every transaction starts an nft process
//     that lists the table's chains into its cache first (85 ms at 10k
//     services, half a second at 100k) and parses every element on its own
//     (about 10 µs each): a cold full sync takes 3.9 s at 10k, 49 s at
//     100k.
//
// # Reading the kernel
//
// ParseListing reads what "nft list table ip|ip6 proxykit" prints into a
// Ruleset, whose Trace follows a packet through the table as the kernel
// holds it (chains, rules, set and map elements), in State.LookupMode's
// Verdict shape, with the chains and map elements it met. It is how a
// troubleshooting tool (package troubleshoot, the node agent's verify and
// explain --kernel) tells what the kernel does from what the model says.
// Rules are read in the forms the Dataplane writes; a rule of another
// form (someone edited the table) makes Trace fail, naming it. Reading
// (NewReading) is the whole kernel reading troubleshooting takes: the
// table and, when read, the other tables that run first (Others). A test
// programs every conformance scenario through nft and traces the listing
// against State.LookupMode. ListTable reads the listing over netlink, so
// that no nft binary is needed; the other tables are read from "nft list
// ruleset", which needs one.
//
// Other programs' tables run beside the proxy's: the kernel calls every
// base chain hooked at prerouting (output for the node's packets) in
// priority order, and one that drops, rejects or rewrites service traffic
// before the proxy's nat chain decides it (kube-proxy's own table, left
// behind by a migration, is the usual one). ParseOthers reads the other
// tables from "nft list ruleset", and Others.Trace follows their base
// chains at or before dstnat priority: matches on addresses, protocols,
// ports, sets and verdict maps (concatenations included), fib daddr type,
// ct state and input interfaces; jumps, gotos, random choices, dnat,
// redirect, accept, drop, reject and a drop policy. A rule of another form
// (a mark, a meter) is taken as not matching, and named when it could
// have decided; the trace then claims no policy drop.
//
// # Differences from upstream
//
//   - The table is "proxykit", not "kube-proxy", and the first rule of each
//     per-service chain carries a signature comment.
//   - A full sync reads the table back and writes only what differs, where
//     upstream flushes and rewrites every chain; the hourly full sync thus
//     costs a listing, not a rewrite, and Reconcile repairs drift.
//   - Several service ports claiming one destination are resolved by
//     order, as State.Lookup; upstream's winner depends on map order.
//   - Tables are written over netlink by default, where kube-proxy 1.37
//     runs nft (its NFTablesNetlink gate lists over netlink only).
//   - Large full syncs through nft are split into several transactions
//     (Config.MaxOperations).
//   - An affinity set's name ends in its timeout, so that a changed
//     timeout (which nft cannot change in place) brings new sets.
//   - Localhost node ports (an alpha feature upstream) are not served.
//   - A port whose name is too long for an element's comment has chains
//     where kube-proxy would write only a cut comment (see Namespace).
//   - Invalid ports, addresses and endpoints (wrong family, port 0, names
//     the API server refuses as too long or that are unsafe in an object
//     name, out-of-range affinity timeouts) are skipped
//     and reported through Config.OnSkip instead of failing the whole
//     transaction.
package nftables
