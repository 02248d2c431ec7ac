// Package conntrack flushes the conntrack entries that keep UDP and SCTP
// traffic flowing to places a service no longer sends it.
//
// A datagram protocol has no end-of-connection the kernel can see, so a
// conntrack entry created by a DNAT rule lives as long as the client keeps
// sending: a client that sends every few seconds stays pinned to a deleted
// endpoint, or to a service IP that no longer exists, forever. TCP is left
// to the kernel's own state machine, as kube-proxy leaves it: a TCP flow to
// a dead endpoint is reset or times out on its own, and deleting a live one
// would break a connection that still works.
//
// A Cleaner is handed what the trackers reported after a successful sync
// (servicemodel.Changes.Stale, endpoints.Changes.Stale and the changed
// ports) together with the State now programmed, and deletes, in one dump of
// the family's table:
//
//   - every flow whose original destination is a stale frontend (a cluster
//     IP, external IP or LoadBalancer VIP with its port, of a deleted
//     service, a removed port, or a port whose service scaled to zero),
//     whether or not it was DNATed;
//   - every DNATed flow to a stale node port, matched by protocol and
//     original destination port (node ports are served on every node
//     address, so the port is all a flow carries);
//   - every DNATed flow whose reply source is a stale endpoint, for the
//     endpoint's protocol, sent to a frontend of the port it left;
//   - for each changed port, every flow sent to one of its frontends (its
//     node port included, while something serves it) whose replies do not
//     come from an endpoint serving it now: kube-proxy's reconciliation,
//     which also catches flows that began un-NATed while the port had no
//     endpoints or the service did not exist yet.
//
// # Differences from kube-proxy
//
// kube-proxy reconciles the whole table against the current services after
// each sync that touched a UDP service. That misses what is no longer in the
// current services: flows to deleted services and removed ports are never
// flushed, SCTP is not handled at all, and node-port flows of a service
// without endpoints are kept. Working from what became stale covers all of
// those, and dumps the table once, not twice (kube-proxy lists it, then has
// netlink dump it again to delete by exact tuple; here the stale predicate is
// the delete filter, and netlink deletes each matched flow by the tuple it
// was dumped with, which is just as exact).
//
// A pod may back several services on the same port. When StaleFlows.State is
// given, a stale endpoint's flows are deleted only if their original
// destination is a frontend of the service port the endpoint left, as
// kube-proxy restricts it; without it, every DNATed flow to that endpoint
// goes.
//
// A changed port's node port is reconciled as kube-proxy reconciles it: by
// protocol and destination port alone, in the family's table, and only
// while the port has a serving endpoint (with none, every flow to that port
// number would go, whoever owns it). A flow that was not DNATed goes too: a
// client that sent to the node port before the service existed was refused,
// or answered by a process on the node, and would stay so for as long as it
// keeps its source port. A node port that became stale (its service or port
// deleted) takes only DNATed flows: one whose replies come from the node
// address and port it was sent to belongs to a process on the node that
// listens on that number, not to a service.
//
// Every call that dumps the table is retried a few times when the kernel
// reports the dump interrupted (the table changed under it), as kube-proxy
// does on EINTR.
//
// # Reading
//
// DNATFlows lists a family's table, only reading it, and returns the
// DNATed TCP, UDP and SCTP flows with their client, frontend and
// endpoint: where each connection to a service went, which package
// troubleshoot compares with the endpoints that serve now.
package conntrack
