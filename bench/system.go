package main

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// system is one service proxy under test. It is given Kubernetes objects
// as informers would give them and programs them, synchronously, on sync.
type system interface {
	updateNode(n *v1.Node)
	updateService(old, new *v1.Service)
	updateSlice(old, new *discovery.EndpointSlice)
	// sync programs everything given so far and returns when the
	// backend has it.
	sync() error
	backend() backend
}

// backend is what a system hands its rules to: a discarding stand-in for
// the kernel, or the kernel (inside the benchmark's namespace) with a
// recording wrapper.
type backend interface {
	// failNext makes the next write fail as a rejected restore would, so
	// that the sync after it is a full one.
	failNext()
	// beginSync marks the start of a sync: what written reports and the
	// first sync's input cover every write between two calls (a system
	// may split a sync into several transactions).
	beginSync()
	// written is the size of what the last sync handed to the backend.
	written() int
	// firstInput is what the first sync handed to the backend, all its
	// writes in order, valid until the next sync.
	firstInput() []byte
}

// callCounter is a backend that counts the calls a system makes to the
// kernel one by one: IPVS mode's netlink messages and ipset commands,
// beside which its iptables rules are one restore.
type callCounter interface {
	// calls is how many so far.
	calls() int
}

// kernelCalls is how many calls be's systems have made so far, if it
// counts them.
func kernelCalls(be backend) (int, bool) {
	switch b := be.(type) {
	case callCounter:
		return b.calls(), true
	case multiBackend:
		n := 0
		for _, s := range b {
			k, ok := kernelCalls(s.backend())
			if !ok {
				return 0, false
			}
			n += k
		}
		return n, true
	}
	return 0, false
}

// errInjected is the failure failNext injects.
var errInjected = errors.New("failure injected by the benchmark")

// Backends a system can run on. Every one but discard programs the kernel
// of the child process's own network namespace.
const (
	discard = "discard"
	// fake is each project's own simulated kernel, which the correctness
	// cross-check reads back; it is not timed.
	fake           = "fake"
	iptablesLegacy = "iptables-legacy"
	iptablesNFT    = "iptables-nft"
	nftables       = "nftables"
)

// systemSpec describes one column of the table.
type systemSpec struct {
	// key is the -systems and child-process name.
	key string
	// title is the column header.
	title string
	// pair groups the systems compared by ratio: "iptables", "nftables"
	// or "ipvs".
	pair string
	// upstream is kube-proxy; the others are proxykit.
	upstream bool
	// kernels are the real backends the system can run on.
	kernels []string
	// new returns the system on a backend; nil means the system is not
	// built in this tree, and its column says so.
	new func(backend string, family v1.IPFamily) (system, error)
}

// systems lists every system, upstream first in each pair.
var systems = []systemSpec{
	{key: "kube-iptables", title: "kube-proxy iptables", pair: "iptables", upstream: true,
		kernels: []string{iptablesLegacy, iptablesNFT}, new: newKubeIPTables},
	{key: "proxykit-iptables", title: "proxykit iptables", pair: "iptables",
		kernels: []string{iptablesLegacy, iptablesNFT}, new: newProxykitIPTables},
	{key: "kube-nftables", title: "kube-proxy nftables", pair: "nftables", upstream: true,
		kernels: []string{nftables}, new: newKubeNFTables},
	{key: "proxykit-nftables", title: "proxykit nftables", pair: "nftables",
		kernels: []string{nftables}, new: newProxykitNFTables},
	{key: "kube-ipvs", title: "kube-proxy ipvs", pair: "ipvs", upstream: true, new: newKubeIPVS},
	{key: "proxykit-ipvs", title: "proxykit ipvs", pair: "ipvs", new: newProxykitIPVS},
}

// newSystem returns spec's system for the families: one proxier or
// dataplane per family, each given every object, as kube-proxy's
// metaproxier does.
func newSystem(spec systemSpec, be string, families []v1.IPFamily) (system, error) {
	var all multiSystem
	for _, f := range families {
		s, err := spec.new(be, f)
		if err != nil {
			return nil, err
		}
		all = append(all, s)
	}
	if len(all) == 1 {
		return all[0], nil
	}
	return all, nil
}

// multiSystem is one system per IP family, fed the same objects.
type multiSystem []system

func (m multiSystem) updateNode(n *v1.Node) {
	for _, s := range m {
		s.updateNode(n)
	}
}

func (m multiSystem) updateService(old, new *v1.Service) {
	for _, s := range m {
		s.updateService(old, new)
	}
}

func (m multiSystem) updateSlice(old, new *discovery.EndpointSlice) {
	for _, s := range m {
		s.updateSlice(old, new)
	}
}

func (m multiSystem) sync() error {
	var errs []error
	for _, s := range m {
		errs = append(errs, s.sync())
	}
	return errors.Join(errs...)
}

func (m multiSystem) backend() backend { return multiBackend(m) }

// multiBackend is the backends of a multiSystem: a failure is injected
// into every family's, and their writes add up.
type multiBackend []system

func (m multiBackend) failNext() {
	for _, s := range m {
		s.backend().failNext()
	}
}

func (m multiBackend) beginSync() {
	for _, s := range m {
		s.backend().beginSync()
	}
}

func (m multiBackend) written() int {
	n := 0
	for _, s := range m {
		n += s.backend().written()
	}
	return n
}

func (m multiBackend) firstInput() []byte { return m[0].backend().firstInput() }

func lookupSystem(key string) (systemSpec, error) {
	for _, s := range systems {
		if s.key == key {
			return s, nil
		}
	}
	return systemSpec{}, fmt.Errorf("unknown system %q", key)
}
