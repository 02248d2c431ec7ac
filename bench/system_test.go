package main

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestProxykitOperations runs the benchmark's operations on proxykit's
// iptables dataplane with the discarding runner and on its IPVS dataplane
// on ipvstest's fakes (kube-proxy's proxiers are left out: even on a fake
// backend they touch the namespace's netlink).
func TestProxykitOperations(t *testing.T) {
	for _, key := range []string{"proxykit-iptables", "proxykit-ipvs"} {
		spec, err := lookupSystem(key)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []workload{
			{Name: "single", Services: 20, Endpoints: 3},
			{Name: "dual", Services: 20, Endpoints: 3, DualStack: true},
			{Name: "mix", Services: 20, Endpoints: 3, Mix: true},
		} {
			t.Run(key+"/"+w.Name, func(t *testing.T) { checkOperations(t, spec, w) })
		}
	}
}

// checkOperations requires a one-endpoint change to hand the backend less
// than the first sync, and the sync after a failed one to be full.
func checkOperations(t *testing.T, spec systemSpec, w workload) {
	c := newCluster(w)
	sys, err := newSystem(spec, discard, w.families())
	if err != nil {
		t.Fatal(err)
	}
	be := sys.backend()
	// handed is what a sync hands the backend: calls where it counts them
	// (an IPVS change writes no iptables rules), else bytes.
	handed := func() int {
		be.beginSync()
		before, counted := kernelCalls(be)
		if err := sys.sync(); err != nil {
			t.Fatal(err)
		}
		if after, _ := kernelCalls(be); counted {
			return after - before
		}
		return be.written()
	}
	sys.updateNode(c.node)
	for i := range c.services {
		sys.updateService(nil, c.services[i])
		for _, sl := range c.slicesOf(i) {
			sys.updateSlice(nil, sl)
		}
	}
	first := handed()
	for _, u := range c.changeEndpoint(3, 1) {
		sys.updateSlice(u.old, u.new)
	}
	if partial := handed(); partial == 0 || partial >= first {
		t.Errorf("one-endpoint change handed over %d, the first sync %d", partial, first)
	}
	be.failNext()
	for _, u := range c.changeEndpoint(4, 1) {
		sys.updateSlice(u.old, u.new)
	}
	if err := sys.sync(); err == nil {
		t.Fatal("sync with an injected failure succeeded")
	}
	if err := sys.sync(); err != nil {
		t.Fatal(err)
	}
	var full []bool
	for _, s := range systemsOf(sys) {
		full = append(full, s.(*proxykitSystem).full)
	}
	if diff := cmp.Diff(slices.Repeat([]bool{true}, len(w.families())), full); diff != "" {
		t.Errorf("the sync after a failure was not full in every family (-want +got):\n%s", diff)
	}
}

func systemsOf(s system) []system {
	if m, ok := s.(multiSystem); ok {
		return m
	}
	return []system{s}
}
