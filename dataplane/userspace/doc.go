// Package userspace is the userspace dataplane: kube-proxy's fourth mode,
// forwarding every service frontend through a Go forwarder instead of
// netfilter rules, so that it also runs where netfilter is absent or
// forbidden (no root, sandboxed runtimes, tests, a program embedding a
// cluster's services).
package userspace
