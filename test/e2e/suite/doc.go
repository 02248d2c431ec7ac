// Package suite is which of Kubernetes' own e2e tests the fixture runs,
// how it runs them, and what it keeps of their results.
//
// The selection is every spec of k8s.io/kubernetes v1.37.2's test/e2e in
// four describe blocks that test a service proxy (Groups): "[sig-network]
// Services", "[sig-network] Networking Granular Checks: Services",
// "[sig-network] Conntrack" and "[sig-network] KubeProxy" — 80 specs, of
// which 15 are [Conformance] (FocusConformance, the subset CI runs).
// Unrunnables lists, with the reason read from each test's source, the
// ones this fixture cannot host: the two [Disruptive] specs (they restart
// kube-proxy and the API server by deleting their pods; here both are
// processes) and, where the kernel has no SCTP, the four SCTP specs. Run
// leaves those out by exact name, so every other spec runs and the suite
// itself decides, by counting Ready nodes, which need more nodes than the
// cluster has (NodesNeeded: none of the Networking or Conntrack specs runs
// on one node, one Services spec needs three).
//
// Run runs the precompiled e2e.test with the ginkgo CLI, as upstream's
// hack/ginkgo-e2e.sh does: ginkgo's flags (--procs, --focus, --skip,
// --json-report), the binary, "--", then the suite's flags
// (--provider=local, --kubeconfig, --kubectl-path, --num-nodes,
// --report-dir; the node count must be given, as the suite counts the
// nodes itself only on its first process). Ginkgo runs the [Serial] specs
// last on one process by itself. Run then reads
// ginkgo's JSON report with ginkgo's own types and condenses it into a
// Result: each selected spec's full name, state, duration, the head of
// its failure message and where it failed, or why it was skipped.
//
// Run never enters a namespace: Options.Command builds the command (the
// cluster's runner namespace, for the fixture), and the same e2e.test runs
// against any cluster with the arguments Args returns.
package suite
