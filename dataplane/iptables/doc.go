// Package iptables is the iptables dataplane: it turns a dataplane.State
// into netfilter rules with one atomic iptables-restore --noflush per sync
// (ip6tables-restore for IPv6), following kube-proxy's iptables mode rule
// for rule: ClusterIPs, NodePorts (node-port addresses, localhost node ports
// with route_localnet and the martian-blocking rule), external IPs,
// LoadBalancer VIPs with source ranges, internal and external traffic
// policy Local with the external chain's short-circuits, health-check node
// port ACCEPT rules, ClientIP affinity ("recent"), random balancing
// ("statistic"), hairpin and off-cluster masquerade through a configurable
// mark, the four local-traffic detectors, REJECT without endpoints, DROP
// without local endpoints and the conntrack INVALID drop. Which endpoints
// serve which traffic is asked of State.Select; nothing here re-decides it.
//
// # Namespace
//
// Every chain carries Config.ChainPrefix ("PK-" by default, never kube-
// proxy's "KUBE-", so both can run on one node): PK-SERVICES,
// PK-NODEPORTS, PK-EXTERNAL-SERVICES, PK-POSTROUTING, PK-MARK-MASQ,
// PK-FORWARD, PK-PROXY-FIREWALL, PK-FIREWALL, the canary PK-PROXY-CANARY
// (in nat and filter, holding one RETURN rule), and per service port the
// hashed PK-SVC-, PK-SVL-, PK-EXT-, PK-FW- and PK-SEP- chains (upstream's
// hash, at most 28 characters). Built-in chains only get jump rules, added
// with github.com/coreos/go-iptables; no chain without the prefix is ever
// flushed, reordered or given a rule. The one exception is Cleanup with
// iptables-nft, which creates the nftables table behind an iptables table
// and hooks each built-in chain into the stack when the first rule goes
// there: Cleanup then also deletes, through sigs.k8s.io/knftables, those
// the dataplane jumps from that are left empty with an accept policy, and
// the table once nothing else is in it. Nothing that holds a rule, a drop
// policy or another program's chain is touched.
//
// # Syncs that cost what changed
//
// Upstream rewrites its dispatch chains (KUBE-SERVICES, KUBE-NODEPORTS and
// every filter chain) on every sync, so even a one-endpoint change costs
// O(services). Here the dispatch chains are kept in a fixed order (by
// namespace, name, port name and protocol, the order State.Lookup breaks
// ties in) that the dataplane models in memory. A partial sync therefore
// writes only the changed services' own chains plus single-rule edits of
// the shared chains: a delete of the exact old rule (-D, so a kernel that
// drifted from the model fails the restore instead of being silently
// corrupted) and an insert at the computed position (-I CHAIN N). The
// kernel then holds exactly what a full render would write. Services to
// look at come from State.ChangedSince; when it cannot tell, every service
// is rendered and compared, and still only differences are written.
//
// A full sync re-renders only the services whose inputs changed since the
// last full rendering (States share unchanged services and endpoint lists
// by pointer, so that is a pointer comparison). Each service port's own
// chains are kept as one block of rule text, and the restore input is
// streamed from those blocks into iptables-restore (Runner.Restore takes a
// RestoreInput that writes itself), never built whole in memory. A full
// sync with many services to render (at least 256 per goroutine) spreads
// them over Config.RenderWorkers goroutines (GOMAXPROCS, at most 4, by
// default); the rules and the order of skip reports are those of one
// goroutine. At 10k
// services × 10 endpoints, compute only, here (2 cores, CPU time):
//
//	                     first sync              forced full sync
//	before               340 ms, 183 MB, 2.46 M  308 ms, 162 MB, 2.45 M
//	now                  140 ms,  40 MB, 0.33 M   54 ms,   6 MB, 0.01 M
//
// (BenchmarkFirstSyncModel, BenchmarkForcedFullModel; "before" rendered
// every rule as its own string and every service on every full sync.)
// Between syncs the dataplane holds about 25 MB, where the rule strings
// and a kept 37 MB input buffer held 79 MB.
//
// The first Sync, the first after any failure and one after a change of
// node addresses or settings are full: every owned chain is rewritten, the
// jumps re-ensured, and per-service chains of the prefix that nothing uses
// any more (left by a failed sync or an earlier run of the program) are
// deleted, found with iptables-save. The jumps from the built-in chains
// that the listing lacks are inserted by the same restore (an iptables
// process per jump would each read the whole, by then full, table), and
// the rendering runs beside the two listings, so a first sync costs about
// one bare restore of its input: with iptables-legacy, 1.19× at 1k and at
// 10k services in the bench module's run (kube-proxy's iptables proxier
// there: 2.52× and 1.14×), 1.07× and 1.22× in BenchmarkFirstSync before
// the listings overlapped the rendering. A restart thus
// reconciles whatever it finds. A rejected restore changes nothing in the
// kernel and is returned as a *RestoreError naming the failing line with
// its context; one that outlives the deadline its size allows is killed
// and says so, and a large ruleset on the nft backend of iptables (slow
// to restore) is warned about once.
//
// # Cost model
//
// What each kind of Sync costs at 10,000 ClusterIP services × 10
// endpoints, measured on a Runner that takes every restore and discards it
// (the bench module's compute rows): calls to the Runner (restores and
// listings), what the Build of the State and the Sync allocate (for a
// change, the Builder's update too), and the restore input's size.
//
//	                      calls  objects  allocated  restore input
//	first sync                3     210k      60 MB        31 MB
//	one-endpoint change       1      140      33 KB       1.5 KB
//	forced full resync        3      656     5.6 MB        31 MB
//	idle resync               0       29     1.6 KB          0
//
// A first or full sync is two listings and one restore; a change is one
// restore whatever the cluster's size (at 1,000 services: 138 objects, 31
// KB); a forced full resync (here after one change) re-renders only the
// services changed since the last full sync and streams the kept blocks.
// These figures are promises that fail a check: TestCost in the bench
// module (which CI runs; "cd bench && go test -run TestCost -v ." prints
// them) fails when a change allocates more at 10k services than 1.25 times
// its allocations at 1k plus 25 objects (or 4 KiB), or a first, forced full
// or idle sync at 10k more than 320k, 1,000 or 60 objects (the first two
// more than 90 or 8.5 MB).
//
// # Repairing what others change
//
// The Dataplane is a dataplane.Reconciler and a dataplane.KernelWatcher.
// Reconcile lists nat and filter once each and compares every owned chain,
// rule by rule, and every jump with what the last Sync programmed. Rules
// are compared by what they do (Rule.Key), because iptables-save spells
// them differently from the restore input (match order, /32, marks as
// --set-xmark, the kernel's rounding of probabilities, default options).
// Only what differs is written: the changed or missing chains, deletion of
// unknown chains of the prefix, the missing jumps; an untouched kernel
// costs two listings and no restore. KernelChanged reads a number every
// change moves (xtables.GenerationOf): with the nft backend the nftables
// ruleset generation (one netlink round trip, package
// dataplane/internal/nfgen), which every iptables-nft commit in the
// namespace moves; with the legacy backend a fingerprint of the kernel's
// summary of each loaded table (its rule count, size and hook offsets,
// one getsockopt per table), which a rule added, deleted or flushed
// moves. Only when someone else moved it since the kernel was last seen
// as programmed does it compare the tables as Reconcile does: a flush, a
// deleted or changed rule, a foreign rule in an owned chain or a missing
// jump is noticed at the next poll (with legacy, a rule replaced by one
// of the same size waits for the periodic Reconcile). With a Runner that
// has neither, it lists the two canary chains: a missing chain or rule
// means a flush or a firewall reload.
// The proxykit package calls Reconcile every sync period and whenever
// KernelChanged says so; there is no periodic blind rewrite.
//
// # Without a kernel
//
// An xtables.FakeRunner is the one way to run the Dataplane without
// touching the kernel: it keeps a simulated kernel (a Ruleset that applies restore
// input with iptables' checks), records every input and, with Output set,
// prints each as iptables-restore would have read it (the node agent's
// --dry-run); with it, Config.Sysctl defaults to an empty fake. Render
// returns the exact restore input of a full sync, sorted and deterministic.
// xtables' Ruleset.Trace follows a dataplane.Packet through
// such tables and answers in State.Lookup's Verdict shape, which is how the
// tests prove the rules equal the specification. The same conformance suite
// also runs through the real kernel (dataplanetest/kerneltest), every case
// it can send becoming TCP or UDP connections in network namespaces, and
// the model's fuzz corpora are replayed into a real iptables-restore.
//
// xtables.ParseSave reads iptables-save output (nat, filter and mangle),
// everyone's rules, into a Ruleset for the same Trace: that is how a troubleshooting
// tool tells what the kernel does. Trace crosses mangle before nat, where a
// DROP is the verdict; a REDIRECT, or a TPROXY in mangle PREROUTING, is a
// DNAT to the node itself (to the unspecified address at the port a
// socket of the node gets the connection on); a "-m set" match
// is followed when the Ruleset has the node's ipsets (SetIPSets), and
// never matches without them.
//
// # Metrics
//
// Given a Config.Registerer, a Dataplane exports (labelled ip_family, so
// that both families' Dataplanes share one registry) the counterparts of
// kube-proxy's iptables proxier metrics (sync durations, which every
// dataplane has, are the proxykit package's), under
// Config.MetricsNamespace ("proxykit" by default):
//
//   - proxykit_iptables_restore_failures_total{sync="full"|"partial"|"repair"}:
//     the restore and partial-restore failure counters, and failed repairs;
//   - proxykit_iptables_restore_timeouts_total: restores killed at the
//     deadline their size allows (ExecConfig.RestoreTimeout);
//   - proxykit_iptables_rules{table}: sync_proxy_rules_iptables_total, the
//     rules in the dataplane's own chains (the canary's left out), kept
//     exact across partial syncs without listing the kernel, and set from
//     what was read back at each Reconcile (so drift shows there first);
//   - proxykit_iptables_rules_last_sync{table}: sync_proxy_rules_iptables_last,
//     the rules the last restore appended or inserted.
//   - proxykit_iptables_localhost_nodeports_accepted_packets_total and
//     proxykit_iptables_ct_state_invalid_dropped_packets_total: kube-proxy's
//     nfacct counters, read from the kernel at scrape time, and
//     proxykit_iptables_nfacct_available{ip_family}, 0 on a kernel without
//     nfnetlink_acct, where the rules are written without them
//     (Config.Accounting).
//
// # Differences from upstream
//
//   - The node's own connections to an external IP or LoadBalancer VIP of
//     a port with no endpoints are rejected locally (PK-EXTERNAL-SERVICES is
//     also hooked from filter OUTPUT), as State.Lookup specifies; upstream
//     lets them leave the node.
//   - Crossing the large-cluster threshold (more than 1000 endpoints, which
//     drops per-endpoint comments) forces a full sync, so the kernel always
//     equals a fresh render; upstream leaves old chains commented.
//   - No hourly full rewrite: Reconcile reads the kernel back on the
//     proxy's sync period and repairs only what differs, and the canaries
//     carry a rule, so "iptables -F" (which deletes no chain) is noticed
//     too; upstream's canaries are empty chains, checked every sync period.
//   - Invalid ports, addresses and endpoints (wrong family, unparsable,
//     port 0, names unsafe in a comment or longer than the API server
//     allows, out-of-range affinity timeouts) are skipped and reported
//     through Config.OnSkip instead of reaching iptables-restore and
//     failing the whole sync. Every name the API server accepts is served:
//     at 63 characters each for namespace, name and port name, the longest
//     comment is 253 bytes of the 255 iptables holds.
//   - The health-check rule of a non-TCP port says its protocol in the
//     comment, so that each rule identifies its service port.
package iptables
