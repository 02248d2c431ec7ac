// Package proxykit assembles a Kubernetes service proxy from the library's
// parts: what kube-proxy would be if it were built to be imported.
//
//	source ──► dataplane.Builder ──► bounded-frequency loop ──► dataplane(s) ──► conntrack cleanup
//	(informers,  (servicemodel and     (min period, periodic     (dual-stack, or
//	 manifests,   endpoints trackers)   reconcile, canary,        two side by side)
//	 your own)                          retry with backoff)
//
// New(Config) builds a Proxy and Run(ctx) runs it until ctx ends: every
// Source is started, the first sync waits until all have synced (as
// kube-proxy waits for its Service and EndpointSlice informers), and from
// then on each change asks for a sync. RunOnce syncs once and returns, for a
// node agent's --once. Alongside, the Proxy serves kube-proxy's /healthz and
// /livez (or hands out their http.Handlers), one health-check node port per
// externalTrafficPolicy: Local LoadBalancer service, and Prometheus metrics
// on the caller's Registerer.
//
// # A map of the library
//
// The data flows through these packages in this order; each imports only
// packages before it (and its helpers):
//
//   - source (Source, Handler, Static, Func), source/informer (a cluster
//     through client-go), source/manifest (YAML and JSON files): where
//     objects come from.
//   - servicemodel and endpoints: Services and EndpointSlices as
//     normalized, immutable values, their Maps and change Trackers;
//     affinity: which endpoints serve which traffic.
//   - dataplane: State (one family's view), Builder (objects to States),
//     State.Lookup and LookupMode (the executable specification of every
//     mode), and the Dataplane interface with its optional abilities.
//   - The dataplanes, each standing alone: dataplane/iptables
//     (iptables-restore), dataplane/nftables (one nftables table),
//     dataplane/ipvs (IPVS with its ipsets and a few iptables rules;
//     dataplane/ipvs/ipvstest fakes its kernel) and dataplane/userspace (Go
//     forwarders, unprivileged or behind TPROXY). What they share has a
//     package of its own: dataplane/xtables (the iptables toolkit: runner,
//     fake, parser, tracer), dataplane/sysctl (kernel settings) and
//     dataplane/conntrack (stale-flow cleanup).
//   - dataplane/dataplanetest (a recording fake and the conformance suite)
//     and dataplane/dataplanetest/kerneltest (the suite through a real
//     kernel): how every dataplane, yours too, proves it follows the
//     specification.
//   - health (/healthz, /livez, health-check node ports) and this package,
//     which assembles them into a running proxy.
//   - troubleshoot: Diagnose, Verify and List over States and the readings
//     of the kernel that each dataplane exports; it imports no dataplane.
//
// # Sources
//
// A source.Source delivers Services, EndpointSlices and Nodes to a
// source.Handler. Each kind of source is its own package, so a program
// links only the sources it uses: source.Static and source.Func (objects
// in memory, or a source of your own) come with package source, which
// needs nothing beyond k8s.io/api and apimachinery; source/informer
// watches a cluster through client-go with kube-proxy's server-side
// filters; source/manifest serves YAML or JSON files, re-read when they
// change, so that everything runs without a cluster. A program that
// imports this package and no source/informer does not link client-go.
//
// # Health
//
// Package health holds kube-proxy's /healthz and /livez state and
// handlers and the health-check node port servers; the Proxy drives them
// from its sync loop and counts their answers on its metrics.
//
// # The sync loop
//
// Requests coalesce: a burst of changes is one sync. A sync starts no
// earlier than MinSyncPeriod after the previous one ended, one runs at
// least every SyncPeriod, and syncs never overlap. Every sync builds one
// State per family and hands it to each dataplane of that family in
// Config order. A dataplane whose Sync fails keeps its previous rules and
// is not told it programmed anything: the next State's ChangedSince then
// reports it cannot tell what changed since that dataplane's last
// programmed State, and the dataplane programs everything. The failed sync
// is retried after RetryPeriod, doubling per failure up to MaxRetryPeriod.
// Each dataplane's sync is logged, one line at default verbosity when it
// wrote something (full or partial, as the dataplane reports through
// dataplane.SyncReporter, services written, duration), at V(2) otherwise.
//
// After a family's dataplanes all succeed, the proxy records the family as
// healthy, feeds the health-check node ports, observes network programming
// latency and hands the ConntrackCleaner what became stale.
//
// # Reconciling with the kernel
//
// A dataplane remembers what it programmed and diffs the next State
// against that memory, which someone else can make wrong (a firewall
// reload, an administrator's "iptables -F", a script). The proxy owns one
// schedule for setting that right: every SyncPeriod, the sync that runs
// also calls Reconcile on each dataplane.Reconciler, which reads back
// what it owns and repairs only what differs; a dataplane that cannot read
// back is made to program everything instead (the Builder is asked for one
// extra State, so that ChangedSince reports it cannot tell). Besides, every
// CanaryPeriod the proxy asks each dataplane.KernelWatcher whether its
// canary was disturbed; if so it reconciles at once. Repairs are counted
// (dataplane_drift_repairs_total) and logged naming what was repaired;
// detections are counted (dataplane_kernel_changes_detected_total), once
// per disturbance. Drift the canary found fails /healthz at once, with the
// body naming the family and dataplane ("drift"), until a reconcile
// repairs it: load balancers pick nodes by /healthz, and a node whose
// rules someone flushed should not get their traffic. It counts as a
// queued change too, so /livez fails if it stays unrepaired past
// HealthTimeout. A failed Reconcile fails the family's sync (retried with
// backoff, as a full sync).
//
// # Logging
//
// The proxy logs through Config.Logger, which logs nothing when zero. At
// verbosity 0 an operator gets one start-up line (node, IP families,
// dataplanes, sources, cluster CIDRs, NodePort addresses), a warning when
// the sources synced without the Node of NodeName, and failures; detail
// starts at V(2). A source that implements fmt.Stringer is named in its
// own words in that line and in its errors.
//
// # Differences from kube-proxy
//
//   - Conntrack cleanup owed by a failed sync is kept (de-duplicated) until
//     a sync and the cleanup succeed; kube-proxy forgets it, which left UDP
//     clients pinned to deleted endpoints. Frontends of deleted services
//     and removed ports, node ports and SCTP are cleaned too (dataplane.StaleFlows).
//   - A failed sync is retried with exponential backoff from RetryPeriod
//     (1s) instead of after a fixed syncPeriod (30s), and SyncPeriod is the
//     reconcile period (read back, repair what differs) rather than a
//     retry interval beside kube-proxy's hourly full rewrite.
//   - The initial sync counts as a queued change from Run's start, so a
//     proxy whose sources never sync turns unhealthy after HealthTimeout;
//     kube-proxy's /healthz answers 200 forever in that case; so it does
//     when a change arrives during a sync that succeeds and every later
//     sync fails (see package health).
//   - Nothing panics or exits the process: a deleted Node or changed node
//     IPs update the State (kube-proxy exits), a bind failure of the
//     healthz or metrics address is returned by Run (kube-proxy retries
//     every 5s), and the loop has a context.
//   - Metrics are registered on the caller's Registerer under a
//     configurable namespace, with per-family, per-dataplane labels where
//     kube-proxy shares one unlabelled series between families.
package proxykit
