package main

import (
	"slices"

	"github.com/proxykit/proxykit/test/e2e/cluster"
)

// vmProcs is how many specs run at a time on VM nodes (see runProxy).
const vmProcs = 1

// needsVM reports whether mode runs on VM nodes (cluster.VM) rather than
// namespaces: the machines we run on have no IPVS in their kernel.
func needsVM(mode string) bool { return mode == "ipvs" }

// clusterKinds are the clusters a run needs per node count: namespaces
// (false) for the modes the machine's kernel runs, VMs (true) for the
// others, in that order.
func clusterKinds(o options) []bool {
	var kinds []bool
	all := slices.Concat(o.kubeProxy, o.modes)
	if slices.ContainsFunc(all, func(m string) bool { return !needsVM(m) }) {
		kinds = append(kinds, false)
	}
	if slices.ContainsFunc(all, needsVM) {
		kinds = append(kinds, true)
	}
	return kinds
}

// proxiesOn are the proxies of ps that run on VM nodes (vm) or on
// namespaces (!vm).
func proxiesOn(ps []cluster.Proxy, vm bool) []cluster.Proxy {
	return slices.DeleteFunc(slices.Clone(ps), func(p cluster.Proxy) bool { return needsVM(p.Mode) != vm })
}
