// Package health reports whether a service proxy is keeping up, the way
// kube-proxy does: a Tracker answers /healthz and /livez from the time
// changes have waited for a successful sync (and, for /healthz, whether
// the node may receive load-balancer traffic), and NodePorts serves the
// health-check node ports of externalTrafficPolicy: Local services.
//
// The rule is kube-proxy's: a family is unhealthy once a change has waited
// the timeout for a successful sync, and a failed sync leaves the changes
// it carried waiting. The proxykit Proxy drives both types from its sync
// loop; a program assembling its own loop calls Tracker.Queued when a
// change arrives, Tracker.Syncing when a sync takes its snapshot and
// Tracker.Synced for each family the sync programmed, and NodePorts.Sync
// after each successful sync. Tracker.Drifted reports rules found changed
// behind a dataplane's back (by its canary), Tracker.Repaired their
// repair: in between /healthz answers 503 and names the dataplane, and
// the drift counts as a queued change.
//
// # Differences from kube-proxy
//
//   - Start counts the initial sync as queued, so a proxy whose sources
//     never sync turns unhealthy after the timeout; kube-proxy's /healthz
//     answers 200 forever in that case.
//   - A change that arrives while a sync runs is owed by the next sync:
//     kube-proxy clears it with the running sync's success (it keeps only
//     the oldest queued time), so if every later sync fails it stays
//     healthy forever.
//   - Health-check node port listen addresses are re-read whenever a port
//     is opened, not once at startup.
//   - Drift found by a dataplane's canary fails /healthz (and the
//     health-check node ports' serviceProxyHealthy) at once, until it is
//     repaired, and is listed in the body's "drift": load balancers pick
//     nodes by /healthz, and a node whose rules someone flushed should
//     not get their traffic. kube-proxy only notices a flush on its next
//     periodic sync and reports nothing.
//   - Metrics are left to the caller: NodePorts.Sync returns how many ports
//     it serves and how many failed to open.
package health
