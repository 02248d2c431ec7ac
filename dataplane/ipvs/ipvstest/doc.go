// Package ipvstest runs the ipvs dataplane without a kernel, as
// net/http/httptest runs servers: Kernel is an ipvs.Kernel of in-memory
// fakes of the kernel's IPVS table (FakeIPVS) and of its links,
// addresses and ipsets (FakeNetlink). The fakes answer as the kernel
// does, count every call (one netlink round trip each) and let a test set
// a real server's connection counts (FakeIPVS.SetConnections) and the
// node's addresses (FakeNetlink.SetLinkAddrs), which node ports follow.
// A dataplane on them touches nothing of the machine: with an
// xtables.FakeRunner for its rules, it leaves /proc/sys alone too.
package ipvstest

import "github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"

// Kernel is an ipvs.Kernel of fakes: give it to ipvs.Config.Kernel, and
// look at (or disturb) what the dataplane programmed through its fields.
type Kernel struct {
	IPVS    *FakeIPVS
	Netlink *FakeNetlink
}

// NewKernel returns a Kernel with an empty IPVS table, no links and no
// sets.
func NewKernel() *Kernel {
	return &Kernel{IPVS: NewFakeIPVS(), Netlink: NewFakeNetlink()}
}

// Handles implements ipvs.Kernel.
func (k *Kernel) Handles() handle.Handles {
	return handle.Handles{IPVS: k.IPVS, Netlink: k.Netlink, Fake: true}
}
