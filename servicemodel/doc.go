// Package servicemodel turns Kubernetes Services into the service ports a
// proxy programs, and tracks them as Services change.
//
// Normalize turns one Service into its ServicePorts of one IP family: the
// family's cluster IP, each valid spec.ports entry, and the fields every
// dataplane needs, parsed once (netip values), filtered to the family,
// sorted and de-duplicated: external IPs, VIP-mode load-balancer ingress
// IPs (for any service type, as upstream), load-balancer source ranges
// (trimmed, masked, and emptied when one of them has prefix length 0,
// meaning "allow all"), internal and external traffic policy, the
// health-check node port (LoadBalancer with externalTrafficPolicy: Local
// only), ClientIP session affinity (via affinity.SessionAffinityOf) and
// trafficDistribution. Addresses are parsed as upstream does, accepting
// leading zeros ("172.30.0.041" is 172.30.0.41) and taking IPv4-mapped IPv6
// addresses as IPv4.
//
// Tracker accepts Service updates from any goroutine and, on Checkout,
// applies the pending ones in O(changes) to a persistent Map, returning the
// new snapshot and the Changes since the previous one: the services and
// port names that changed, the UDP and SCTP frontends that went away (for
// conntrack cleanup), and the current health-check node ports.
//
// # What is skipped
//
// A whole service is skipped, with a *SkipError naming one of the Reason
// constants, when it is not meant to be proxied here (type ExternalName even
// with a cluster IP; clusterIP "None" or ""; no cluster IP of the family; a
// service.kubernetes.io/service-proxy-name label naming another proxy) or
// when it cannot be proxied correctly (an invalid cluster IP, an invalid
// session affinity, a name no Kubernetes object can have). Otherwise only
// the bad parts are dropped and the rest is kept: a port whose protocol is
// not TCP, UDP or SCTP, whose number is outside 1..65535 or node port
// outside 0..65535, or that repeats an earlier port's name, number or node
// port under the same protocol (the first one wins); an invalid external
// IP, ingress IP or source range; a missing health-check node port. Empty
// address strings are dropped silently, as upstream does. The Tracker logs
// each skip and reports its reason to Config.OnSkip, so that bad input is
// seen and counted once per update and never reaches a dataplane.
//
// # Differences from kube-proxy
//
// Semantics follow kube-proxy v1.37's service change tracker except where
// it is weak:
//
//   - Change detection compares normalized ports field by field
//     (ServicePort.Equal) with what was last checked out. Upstream
//     normalizes the old object the caller passes and compares with
//     reflect.DeepEqual, which is sensitive to the order of external IPs,
//     ingresses and source ranges and requires deep-comparable port types.
//     Here a metadata-only update, a resync, a targetPort change (the
//     endpoints' business) or reordered addresses is no change.
//   - Nothing panics on nil or unexpected fields: a ClientIP service without
//     sessionAffinityConfig gets the API default timeout, and the checks
//     the API server would have made (ports, protocols, addresses, names)
//     are made here, because objects from manifests or other sources never
//     passed through it. External IPs the API server refuses as special
//     (unspecified, loopback, link-local) and unspecified cluster or
//     ingress IPs are dropped. An empty protocol is TCP and an empty type
//     is ClusterIP, the API defaults.
//   - Output is deterministic: ports sorted by name and protocol, address
//     lists sorted, and the first of duplicate ports kept (upstream keeps
//     the last of ports with the same name and protocol, and programs both
//     of ports with the same number).
//   - The service-proxy-name label is filtered here, not by an informer
//     label selector as in kube-proxy's main program, so that every source
//     (informers, manifests, direct calls) gets the same filtering and a
//     proxy can claim its own name with Config.ProxyName.
//   - Changes.Stale lists the frontends (cluster IP, external IPs,
//     load-balancer VIPs and node port) of deleted services, removed ports
//     and changed addresses, ports or protocols, for UDP and SCTP.
//     Upstream only tracks UDP, and only through the endpoints' change
//     flag, so flows to frontends that disappeared are never cleaned.
//   - Health-check node ports are maintained incrementally rather than
//     recomputed over every port at each sync.
//   - ServicePort.String brackets IPv6 addresses; upstream prints them
//     bare, which is ambiguous with the port.
//   - There are no feature gates: external IPs are always honoured, as
//     with upstream's default AllowServiceExternalIPs.
package servicemodel
