// Package endpoints turns EndpointSlices into the endpoints of each service
// port, the way kube-proxy's EndpointSlice cache and endpoints change
// tracker do, and hands them out as immutable snapshots.
//
// A [Tracker] handles one IP family. Feed it every EndpointSlice add, update
// and delete (from any goroutine); call [Tracker.Checkout] when you want to
// program: it returns a [Map] (the endpoints of every service, shared with
// earlier snapshots where nothing changed) and the [Changes] since the
// previous Checkout. Applying K changed services costs O(K), never
// O(cluster). [NewMap] builds a Map directly, for tests and for callers
// without a Tracker.
//
// # Merging
//
// A slice belongs to the service named by its kubernetes.io/service-name
// label in its own namespace; a slice without that label, name or namespace
// is skipped. Slices of another address type are ignored: an IPv4 tracker
// takes only AddressTypeIPv4 slices, an IPv6 tracker only AddressTypeIPv6
// (FQDN slices are never proxied). Every port of every slice of a service
// yields a port name (service, port name, protocol) and one [Endpoint] per
// endpoint of the slice; endpoints of one port name from all slices are
// combined into one list, sorted by address and port.
//
// Within that, as upstream:
//   - a port with no name, or a port number that is missing, 0 or out of
//     range is skipped (a missing number would mean "all ports", which no
//     proxy implements);
//   - only the first of an endpoint's addresses is used; it is parsed
//     accepting leading zeros (010.001.000.001 is 10.1.0.1) and normalized;
//   - endpoints of one port name with the same IP but different port
//     numbers are distinct endpoints.
//
// # Conditions, locality, hints
//
// Ready is true unless the condition is present and false, and so is
// Serving, even when Ready is false; Terminating is true only when present
// and true. The tracker does not recompute readiness: "ready" is what the
// EndpointSlice controller published. An endpoint is Local when its nodeName
// equals [Config.NodeName] and that is not empty; its IP is never consulted.
// Zone comes from the endpoint's zone, and the zone and node hints from its
// hints (node hints are always read, as with the PreferSameTrafficDistribution
// gate that is locked on upstream), sorted, de-duplicated, and nil when
// there are none. LocalReady, the count a health-check node port serves, is
// the number of distinct IPs of local, ready endpoints over all ports of a
// service; serving-but-terminating endpoints do not count.
//
// # Duplicates
//
// One address can appear more than once for a port: an endpoint moving
// between slices is briefly in both, and a pod IP can be reused while the
// old pod still terminates. One entry per address and port is kept:
// non-terminating beats terminating, as upstream. Among the rest upstream
// keeps whichever its map iteration met last; here the winner is chosen by
// content alone (ready, then serving, then local, then node, zone and
// hints), so the result never depends on slice names or on the order of
// slices, endpoints or updates.
//
// # Change detection
//
// Upstream compares whole slice objects with reflect.DeepEqual, so an update
// that touches only metadata (a new resourceVersion, an annotation) or
// merely reorders endpoints or ports triggers a sync, marks the service
// updated and, for UDP, requests conntrack cleanup. Here change is judged on
// the merged endpoints of the service: [Tracker.Update] returns true only
// when the update changed what the next Checkout returns, and a service is
// pending only while its merged endpoints differ from the last snapshot, so
// an add undone by a delete before the next Checkout leaves nothing pending
// (upstream reports the service as updated anyway).
//
// Merging is incremental: an update costs the size of the slice (each
// changed address is looked up in the service's other slices), not the
// size of its service, and a Checkout rebuilds only the lists of the ports
// that changed. Upstream re-merges every slice of every changed service. Slices are also tracked
// by namespace and name, so a slice whose service label changes or
// disappears is moved or dropped instead of lingering under its old service.
//
// Trigger times are the endpoints.kubernetes.io/last-change-trigger-time
// annotations of updates that changed a pending service, when later than the
// tracker's creation (read from [Config.Clock]); a deletion discards the
// service's pending times, as upstream.
//
// # Stale endpoints
//
// [Changes.Stale] lists every UDP and SCTP endpoint that was serving a port
// in the previous snapshot and is not serving it in the new one, including
// when its slice or its whole service went away, so that conntrack entries
// through exactly those endpoints can be flushed. Upstream reports a single
// "cleanup required" boolean for UDP only, set by any change to a UDP
// service, metadata-only ones included.
//
// # Other differences from upstream
//
//   - Lists are sorted numerically by address, then port (10.0.0.2 before
//     10.0.0.11); upstream sorts "ip:port" strings, putting 1.1.1.11:11
//     before 1.1.1.1:11.
//   - A port with no protocol is taken as TCP, the API default; upstream
//     dereferences it and panics. Protocols other than TCP, UDP and SCTP are
//     skipped.
//   - An address that does not parse, or is of the other family, is
//     skipped; upstream keeps it (as the string "<nil>" for one that does
//     not parse).
//   - Everything skipped is logged once per slice update and reason through
//     the caller's logger and counted through [Config.OnSkip].
//   - A slice that gives one port name several port numbers, which API
//     validation forbids, is merged as upstream merges it (each endpoint
//     serves the port at every number), and a warning says so once, when
//     the slice starts doing it; upstream is silent. Slices of one service
//     that give a port name different numbers are normal (pods of a
//     rollout may differ) and not warned about.
//   - There is no makeEndpointInfo hook: an [Endpoint] is a concrete,
//     immutable value a dataplane can key its own state by.
package endpoints
