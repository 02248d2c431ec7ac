// Package affinity holds the pure decisions about which endpoints of a
// service port receive which traffic, and how long a client stays pinned to
// one. It does no I/O, keeps no state and logs nothing: dataplanes, the
// packet-lookup model and troubleshooting tools all call the same functions,
// so they cannot disagree.
//
// # What Categorize decides
//
// Categorize follows upstream kube-proxy v1.37 (CategorizeEndpoints in
// pkg/proxy/topology.go) rule for rule:
//
//   - Readiness. Ready endpoints serve traffic. Only when a traffic class has
//     no ready endpoint at all does it fall back to endpoints that are both
//     serving and terminating, so that connections drain during a rolling
//     update instead of being rejected. The fallback is decided separately
//     for Cluster and for Local traffic: Local may use a terminating local
//     endpoint while Cluster still has ready remote ones.
//   - Traffic policies. Policy.UsesClusterEndpoints and
//     Policy.UsesLocalEndpoints say which sets a port needs.
//     internalTrafficPolicy: Local restricts in-cluster traffic to this
//     node's endpoints. externalTrafficPolicy: Local does the same for
//     external traffic, but only on a port that is externally accessible in
//     this family; such a port keeps its Cluster set, because traffic from
//     local pods and from the node itself is short-circuited to it.
//   - Topology. Cluster endpoints (never Local ones) are narrowed by the
//     EndpointSlice hints: to the endpoints hinted for this node when every
//     ready endpoint has a node hint and one names this node; otherwise to
//     those hinted for this node's zone when every ready endpoint has a zone
//     hint and one names the zone; otherwise not at all. Only ready
//     endpoints count, so a narrowed set is never empty while a ready
//     endpoint exists. TopologyMode reports which of the three applied.
//   - Reachability. HasAny is false when no endpoint anywhere is ready or
//     serving and terminating; dataplanes reject such traffic. A port whose
//     Local set is empty while HasAny holds drops its Local traffic instead.
//
// # trafficDistribution and Options.DeriveHints
//
// kube-proxy never reads spec.trafficDistribution: the EndpointSlice
// controller turns it into hints and kube-proxy follows the hints. That
// leaves topology inert wherever nothing writes hints, such as manifests
// fed to a lab proxy or a cluster without the controller. Options.DeriveHints
// (off by default) fills that gap: when no endpoint of the port carries any
// zone or node hint, Categorize acts on the hints the controller
// (k8s.io/endpointslice v0.37.2, package trafficdist) would write for
// Policy.TrafficDistribution, then applies the rules above unchanged:
//
//   - PreferClose and its newer name PreferSameZone: every ready endpoint
//     that knows its zone is hinted for that zone. Since the topology rule
//     wants a zone hint on every ready endpoint, one ready endpoint without a
//     zone turns zone filtering off for the port.
//   - PreferSameNode: the same zone hints, plus a hint for the endpoint's own
//     node on every ready endpoint that knows its node. A node without a
//     local endpoint thus falls back to its zone.
//   - Unset or any other value: no hints, as the controller strips them.
//
// Non-ready endpoints get no derived hints, as from the controller; the
// topology rules never look at them anyway. An empty Zone or NodeName means
// unknown and yields no hint. As soon as any endpoint carries a real hint,
// the slices win and nothing is derived. Derivation cannot reproduce the
// service.kubernetes.io/topology-mode: Auto annotation, whose proportional
// zone allocation needs cluster-wide node capacity, and the controller
// ignores trafficDistribution on such services; callers should leave
// Policy.TrafficDistribution empty for them.
//
// # Session affinity
//
// SessionAffinityOf normalizes spec.sessionAffinity the way API defaulting
// and validation would have: None or unset means no affinity (a leftover
// config is ignored, as defaulting clears it), ClientIP without a timeout
// gets DefaultClientIPTimeout, and a timeout outside (0, MaxClientIPTimeout]
// or an unknown type is an *InvalidError wrapping ErrInvalidSessionAffinity,
// so that callers can skip and count the service.
//
// # Where this package differs from upstream, and why
//
//   - AllReachable is deterministic: the endpoints of Cluster and Local in
//     input order, one that is in both listed once. Upstream builds the merged list from a map, so
//     its order changes from sync to sync, which churns generated rules.
//     Membership is by identity (the endpoint values passed in), not by
//     String(): two distinct endpoints with the same address are both kept,
//     where upstream silently keeps one; inputs are expected to be
//     de-duplicated already, as endpoints.Map is.
//   - nil and empty mean one thing each, as documented on Selection: Cluster
//     is non-nil whenever the policy uses it, even for a port without
//     endpoints (upstream returns nil there), Local is nil whenever it is
//     empty (upstream behaves so, though its comment says otherwise), and
//     AllReachable is nil exactly when both are.
//   - No feature gates. Node hints are always honoured:
//     PreferSameTrafficDistribution is GA and locked on in 1.37, and reading a
//     process-wide gate from a pure function makes it untestable per call.
//   - No panics on unvalidated objects: a ClientIP service without
//     sessionAffinityConfig gets the API default where upstream dereferences
//     a nil pointer, and out-of-range values are reported, not trusted.
//   - No logging. Upstream logs at V(2) why it ignored hints; TopologyMode
//     gives callers the outcome to log or explain as they see fit.
//   - Options.DeriveHints is an addition; its zero value is upstream.
//   - The returned slices share one exact-size allocation whose parts have
//     clipped capacities (ports with more than 128 endpoints add one byte
//     of scratch per endpoint); upstream allocates a full-length list per
//     filter plus a map for the merge.
package affinity
