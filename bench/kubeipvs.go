package main

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	sysctltest "k8s.io/component-helpers/node/util/sysctl/testing"
	kubeipvs "k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	ipsetfake "k8s.io/kubernetes/pkg/proxy/ipvs/ipset/testing"
	netlinkfake "k8s.io/kubernetes/pkg/proxy/ipvs/testing"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
	ipvsfake "k8s.io/kubernetes/pkg/proxy/ipvs/util/testing"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

// ipsetVersion is the version kube-proxy's ipset fake reports, that of
// its unit tests.
const ipsetVersion = "v6.19"

// newKubeIPVS is kube-proxy's IPVS proxier on the fakes its own unit
// tests use for the IPVS table, the ipsets and the dummy link (the
// constructor opens a real netlink handle for the link, which is
// swapped), each call to them counted, and on an iptBackend that
// discards its iptables rules, as kube-proxy's iptables proxier's are.
func newKubeIPVS(be string, family v1.IPFamily) (system, error) {
	if be != discard {
		return nil, fmt.Errorf("kube-proxy ipvs cannot run on %s", be)
	}
	protocol := utiliptables.ProtocolIPv4
	if family == v1.IPv6Protocol {
		protocol = utiliptables.ProtocolIPv6
	}
	b := &kubeIPVSBackend{iptBackend: &iptBackend{protocol: protocol}}
	p, err := kubeipvs.NewProxier(context.Background(), kubeConfig(), family, b.iptBackend,
		countedIPVS{ipvsfake.NewFake(), &b.n}, countedIPSet{ipsetfake.NewFake(ipsetVersion), &b.n},
		sysctltest.NewFake(), proxyutil.NewDetectLocalByCIDR(familyClusterCIDR(family)), nodeName, net.ParseIP(familyNodeIP(family)),
		events.NewFakeRecorder(100), nil, false)
	if err != nil {
		return nil, err
	}
	nl := netlinkfake.NewFakeNetlinkHandle(family == v1.IPv6Protocol)
	// The node's addresses, which node ports are served on.
	if err := nl.SetLocalAddresses("eth0", nodeIP, nodeIPv6); err != nil {
		return nil, err
	}
	if err := swapField(p, "netlinkHandle", func(kubeipvs.NetLinkHandle) kubeipvs.NetLinkHandle { return countedNetlink{nl, &b.n} }); err != nil {
		return nil, err
	}
	return &kubeSystem{p: p, be: b}, nil
}

// kubeIPVSBackend is the backend of kube-proxy's IPVS proxier: its
// iptables rules, and the count of its calls to the IPVS, ipset and link
// handles.
type kubeIPVSBackend struct {
	*iptBackend
	// n is atomic: the proxier's graceful termination checks its IPVS
	// handle from a goroutine of its own.
	n atomic.Int64
}

func (b *kubeIPVSBackend) calls() int { return int(b.n.Load()) }

// countedIPVS counts the calls to kube-proxy's IPVS handle, one netlink
// round trip each.
type countedIPVS struct {
	utilipvs.Interface
	n *atomic.Int64
}

func (c countedIPVS) Flush() error { c.n.Add(1); return c.Interface.Flush() }
func (c countedIPVS) AddVirtualServer(vs *utilipvs.VirtualServer) error {
	c.n.Add(1)
	return c.Interface.AddVirtualServer(vs)
}
func (c countedIPVS) UpdateVirtualServer(vs *utilipvs.VirtualServer) error {
	c.n.Add(1)
	return c.Interface.UpdateVirtualServer(vs)
}
func (c countedIPVS) DeleteVirtualServer(vs *utilipvs.VirtualServer) error {
	c.n.Add(1)
	return c.Interface.DeleteVirtualServer(vs)
}
func (c countedIPVS) GetVirtualServer(vs *utilipvs.VirtualServer) (*utilipvs.VirtualServer, error) {
	c.n.Add(1)
	return c.Interface.GetVirtualServer(vs)
}
func (c countedIPVS) GetVirtualServers() ([]*utilipvs.VirtualServer, error) {
	c.n.Add(1)
	return c.Interface.GetVirtualServers()
}
func (c countedIPVS) AddRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	c.n.Add(1)
	return c.Interface.AddRealServer(vs, rs)
}
func (c countedIPVS) GetRealServers(vs *utilipvs.VirtualServer) ([]*utilipvs.RealServer, error) {
	c.n.Add(1)
	return c.Interface.GetRealServers(vs)
}
func (c countedIPVS) DeleteRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	c.n.Add(1)
	return c.Interface.DeleteRealServer(vs, rs)
}
func (c countedIPVS) UpdateRealServer(vs *utilipvs.VirtualServer, rs *utilipvs.RealServer) error {
	c.n.Add(1)
	return c.Interface.UpdateRealServer(vs, rs)
}
func (c countedIPVS) ConfigureTimeouts(tcp, tcpFin, udp time.Duration) error {
	c.n.Add(1)
	return c.Interface.ConfigureTimeouts(tcp, tcpFin, udp)
}

// countedIPSet counts the calls to kube-proxy's ipset handle, one run of
// the ipset command each.
type countedIPSet struct {
	utilipset.Interface
	n *atomic.Int64
}

func (c countedIPSet) FlushSet(set string) error   { c.n.Add(1); return c.Interface.FlushSet(set) }
func (c countedIPSet) DestroySet(set string) error { c.n.Add(1); return c.Interface.DestroySet(set) }
func (c countedIPSet) DestroyAllSets() error       { c.n.Add(1); return c.Interface.DestroyAllSets() }
func (c countedIPSet) CreateSet(set *utilipset.IPSet, ignoreExist bool) error {
	c.n.Add(1)
	return c.Interface.CreateSet(set, ignoreExist)
}
func (c countedIPSet) AddEntry(entry string, set *utilipset.IPSet, ignoreExist bool) error {
	c.n.Add(1)
	return c.Interface.AddEntry(entry, set, ignoreExist)
}
func (c countedIPSet) DelEntry(entry, set string) error {
	c.n.Add(1)
	return c.Interface.DelEntry(entry, set)
}
func (c countedIPSet) TestEntry(entry, set string) (bool, error) {
	c.n.Add(1)
	return c.Interface.TestEntry(entry, set)
}
func (c countedIPSet) ListEntries(set string) ([]string, error) {
	c.n.Add(1)
	return c.Interface.ListEntries(set)
}
func (c countedIPSet) ListSets() ([]string, error) { c.n.Add(1); return c.Interface.ListSets() }
func (c countedIPSet) GetVersion() (string, error) { c.n.Add(1); return c.Interface.GetVersion() }

// countedNetlink counts the calls to kube-proxy's handle of the dummy
// link and the node's addresses, one netlink round trip each.
type countedNetlink struct {
	kubeipvs.NetLinkHandle
	n *atomic.Int64
}

func (c countedNetlink) EnsureAddressBind(addr, dev string) (bool, error) {
	c.n.Add(1)
	return c.NetLinkHandle.EnsureAddressBind(addr, dev)
}
func (c countedNetlink) UnbindAddress(addr, dev string) error {
	c.n.Add(1)
	return c.NetLinkHandle.UnbindAddress(addr, dev)
}
func (c countedNetlink) EnsureDummyDevice(dev string) (bool, error) {
	c.n.Add(1)
	return c.NetLinkHandle.EnsureDummyDevice(dev)
}
func (c countedNetlink) DeleteDummyDevice(dev string) error {
	c.n.Add(1)
	return c.NetLinkHandle.DeleteDummyDevice(dev)
}
func (c countedNetlink) ListBindAddress(dev string) ([]string, error) {
	c.n.Add(1)
	return c.NetLinkHandle.ListBindAddress(dev)
}
func (c countedNetlink) GetAllLocalAddresses() (sets.Set[string], error) {
	c.n.Add(1)
	return c.NetLinkHandle.GetAllLocalAddresses()
}
func (c countedNetlink) GetLocalAddresses(dev string) (sets.Set[string], error) {
	c.n.Add(1)
	return c.NetLinkHandle.GetLocalAddresses(dev)
}
func (c countedNetlink) GetAllLocalAddressesExcept(dev string) (sets.Set[string], error) {
	c.n.Add(1)
	return c.NetLinkHandle.GetAllLocalAddressesExcept(dev)
}
