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
	return handle.Handles{IPVS: k.IPVS, Netlink: k.Netlink, Fake: true,
		Table: func(scan func([]byte)) error { k.IPVS.procTable(scan); return nil }}
}
