// Package ipvstest runs the ipvs dataplane without a kernel, as
// net/http/httptest runs servers: Kernel is an ipvs.Kernel of in-memory
// fakes of the kernel's IPVS table (FakeIPVS) and of its links,
// addresses and ipsets (FakeNetlink). The fakes answer as the kernel
// does, count every call (one netlink round trip each), fail one on
// request (FakeIPVS.FailNext) and let a test set a real server's
// connection counts (FakeIPVS.SetConnections) and the node's addresses
// (FakeNetlink.SetLinkAddrs), which node ports follow. A dataplane on
// them touches nothing of the machine: with an xtables.FakeRunner for
// its rules, it leaves /proc/sys alone too.
package ipvstest
