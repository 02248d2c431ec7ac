// Package cluster runs a real control plane (etcd and kube-apiserver, built
// from Go modules) and a multi-node lab of node agents in network
// namespaces, for tests that prove the agent against the real components:
// convergence, event-to-rule latency, faults, RBAC, scale, and the
// replacement of upstream kube-proxy (built beside them) by the agent and
// back.
//
// It is a module of its own so that the library's module graph never sees
// k8s.io/kubernetes. Binaries are built once per version into the user's
// cache directory (see Binaries); a cold build takes 13–27 minutes on two
// cores, a warm run reuses them.
//
// Everything runs inside namespaces the tests create; processes are killed
// by PID and namespaces deleted when a test ends, whether it passed or not.
package cluster
