// Package health reports whether a service proxy is keeping up, the way
// kube-proxy does: a Tracker answers /healthz and /livez from the time
// changes have waited for a successful sync (and, for /healthz, whether
// the node may receive load-balancer traffic), and NodePorts serves the
// health-check node ports of externalTrafficPolicy: Local services.
//
// The proxykit Proxy drives both from its sync loop; a program assembling
// its own loop calls Tracker.Queued when a change arrives and
// Tracker.Synced when a family's dataplanes have programmed it, and
// NodePorts.Sync after each successful sync.
//
// # Differences from kube-proxy
//
//   - Start counts the initial sync as queued, so a proxy whose sources
//     never sync turns unhealthy after the timeout; kube-proxy's /healthz
//     answers 200 forever in that case.
//   - Health-check node port listen addresses are re-read whenever a port
//     is opened, not once at startup.
//   - Metrics are left to the caller: NodePorts.Sync returns how many ports
//     it serves and how many failed to open.
package health
