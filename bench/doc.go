// Command bench compares proxykit's dataplanes with upstream kube-proxy's
// proxiers (k8s.io/kubernetes v1.37.2, built by their exported
// constructors) in the three modes both have, iptables, nftables and
// IPVS, on identical workloads, side by side in one run, and prints a
// Markdown table of medians and ratios:
//
//	cd bench && go run . -out results.md          # every workload
//	cd bench && go run . -quick -out results.md   # 1k and 10k services × 10 endpoints
//
// It is a module of its own so that nobody who imports proxykit gets
// k8s.io/kubernetes in their module graph. It needs root (or user
// namespaces) and, for the kernel rows, iptables-legacy and nft.
//
// # What is measured
//
// Each workload (N ClusterIP services × E endpoints, or a mix of NodePort,
// LoadBalancer with source ranges, externalTrafficPolicy Local and
// ClientIP affinity) is handed, as Services and EndpointSlices, to every
// system: upstream through its proxier's informer handlers, proxykit
// through a dataplane.Builder. The operations are the first sync (objects
// in to rules handed over), one endpoint changed, one service added, a
// forced full resync (the sync after a failed one, which every system
// answers with a full rewrite) and an idle resync (nothing changed). For
// each: wall time, heap allocations (bytes and objects) and the bytes
// handed to the kernel; in IPVS mode, where the iptables rules are a
// small fixed ruleset and the services go to the kernel one netlink call
// (or, in kube-proxy's case for its ipsets, one ipset command) at a
// time, also the number of those calls; per process, the peak resident
// set (VmHWM).
//
// Compute-only runs hand the rules to a backend that discards them
// (proxykit's xtables.Runner, upstream's utiliptables.Interface and
// knftables.Interface alike; proxykit's nftables dataplane runs its
// default netlink path up to the encoded batches, which
// nftables.NewEncodeOnly hands to a function, or with -nft-text its nft
// text path), so the figures are the proxies' own cost;
// the projects' fakes, which simulate a kernel, would add their own. IPVS
// mode has no text to discard: both IPVS systems run on their project's
// fakes of the IPVS table, the ipsets and the dummy link (upstream's
// from its unit tests, ipvs/util/testing, ipvs/ipset/testing and
// ipvs/testing; proxykit's ipvstest.Kernel), whose own cost counts in
// their figures, and have no kernel rows.
// Kernel runs program the real kernel (iptables-legacy, iptables-nft or
// nftables): the first sync, set beside a bare restore of the same input,
// the kernel's floor, then one-endpoint changes, each computed and
// written before it returns, after -kernel-warmup (3) unmeasured ones: the
// first changes after a cold load pay for the load's deferred kernel work
// (at 100k the first two take 20 and 6 ms in the kernel, later ones 2 ms). kube-proxy's nftables proxier writes through
// an nft process; proxykit's nftables dataplane over netlink (Config.NFT
// nil, no nft process), and its floor is nft -f of the same ruleset as
// the script the dataplane renders for the State (Dataplane.Render). They
// run for the 1k, 10k and 100k ClusterIP workloads only, whose syncs the
// targets name (at 10k each takes seconds, twice per system and run, and
// would otherwise dominate the default run).
//
// # Isolation
//
// Every measurement runs in a child process (so that systems do not share
// a heap and the peak RSS is each one's) created in a network namespace
// of its own, which the kernel deletes when the child exits: nothing
// reaches the machine's own rules, and upstream's proxiers, which open
// netlink sockets and create nfacct counters even on a fake backend, stay
// inside it. The children of the systems alternate, so that a busy spell
// of a shared machine falls on all of them. Kernel children use an
// xtables lock of their own, so that other programs' iptables runs are
// not timed.
//
// # Correctness cross-check
//
// For each workload up to 100k endpoints, a sample of packets is looked
// up in proxykit's State (State.Lookup, the specification) and traced,
// with proxykit's iptables tracer, through upstream's rules and
// proxykit's; the table reports disagreements, so that the comparison is
// between programs doing the same job.
//
// # Held by a check
//
// The times here move with the machine's load; allocation counts do not.
// TestCost (cost_test.go), which CI runs with this module's tests, holds
// every proxykit mode on its fake kernel (the compute rows' backends, and
// the userspace dataplane with no socket) to the cost model its package
// documentation states: a one-endpoint change allocates the same at 1k and
// 10k services × 10 endpoints, and a first sync, a forced full resync and
// an idle resync at 10k stay within the mode's bound. It is left out of a
// -race build, whose instrumentation changes the counts.
//
// # Adding a system
//
// A system is a constructor in the systems table (system.go) returning
// something that takes objects and syncs synchronously. proxykit's
// dataplanes go through newProxykitSystem with a backend that can discard,
// record and fail a write on request (runner.go for iptables; nftBackend
// in kubebackend.go serves a knftables.Interface, and netlinkBackend
// stands for the kernel nftables reaches over netlink; ipvsBackend injects the
// failure into ipvstest's IPVS table, which every sync calls). Where an
// upstream constructor makes a handle for itself instead of taking one
// (the nftables proxier's knftables.Interface, the IPVS proxier's netlink
// handle), swapField replaces it, the one place the benchmark reaches
// inside upstream. A backend that counts calls to the kernel implements
// callCounter.
package main
