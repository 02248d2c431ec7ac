// Command e2e runs Kubernetes' own e2e tests for service proxies against
// proxykit's node agent, in each mode, and against kube-proxy as the
// baseline, on a real cluster of one, two and three nodes built on this
// machine, and writes REPORT.md.
//
//	sudo env PATH="$PATH" GOTOOLCHAIN=go1.27.3 go -C test/e2e run . [-nodes 1,2,3] [-modes iptables,nftables,userspace] [-kube-proxy iptables] [-focus all|conformance] [-procs 4] [-work DIR] [-keep] [-v]
//	go -C test/e2e run . -report-only
//	sudo go -C test/e2e run . -reclaim
//
// It builds what the cache lacks (package build: Kubernetes v1.37.2's
// components, e2e.test and the ginkgo CLI, etcd, CoreDNS, agnhost, and the
// agent from this checkout) and the suite's images (package images), then
// for each node count brings up a cluster (package cluster), runs the
// selection (package suite) once per proxy — kube-proxy's modes first,
// then the agent's — stopping the proxy and running its --cleanup between
// runs, and tears the cluster down. Each finished run is stored as
// results/<nodes>node-<program>-<mode>.json and REPORT.md is rewritten
// from every stored run (package report), so a later run of one mode
// replaces only its column. Paths are relative to test/e2e, where go -C
// runs the command.
//
// It needs root, and says so otherwise: the fixture creates namespaces,
// mounts and cgroups (never touching the machine's own network namespace).
// An interrupt (SIGINT, SIGTERM) stops the suite as a terminal's ^C would,
// stops the proxy and tears the cluster down; a second one quits at once,
// and the next run, or -reclaim, removes what is left. -keep leaves the
// last cluster up with its last proxy running and prints how to reach it.
//
// The exit code is 0 when every run completed and no spec failed, 1
// otherwise, 2 for a wrong command line or a missing privilege.
package main
