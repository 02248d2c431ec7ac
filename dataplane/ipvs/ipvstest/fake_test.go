package ipvstest

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestFakeIPVSAnswersAsTheKernel checks the errnos a dataplane branches on
// and the table that calls leave behind.
func TestFakeIPVSAnswersAsTheKernel(t *testing.T) {
	vs := func() *mobyipvs.Service {
		return &mobyipvs.Service{Address: net.ParseIP("10.96.0.10").To4(), Protocol: unix.IPPROTO_TCP, Port: 80, SchedName: "rr", AddressFamily: unix.AF_INET}
	}
	rs := func(ip string, w int) *mobyipvs.Destination {
		return &mobyipvs.Destination{Address: net.ParseIP(ip).To4(), Port: 8080, Weight: w, AddressFamily: unix.AF_INET}
	}
	type call struct {
		name string
		do   func(f *FakeIPVS) error
		want error
	}
	calls := []call{
		{"a real server of a missing virtual server", func(f *FakeIPVS) error { return f.NewDestination(vs(), rs("10.244.1.5", 1)) }, unix.ESRCH},
		{"a virtual server", func(f *FakeIPVS) error { return f.NewService(vs()) }, nil},
		{"the same again", func(f *FakeIPVS) error { return f.NewService(vs()) }, unix.EEXIST},
		{"a real server", func(f *FakeIPVS) error { return f.NewDestination(vs(), rs("10.244.1.5", 1)) }, nil},
		{"the same real server again", func(f *FakeIPVS) error { return f.NewDestination(vs(), rs("10.244.1.5", 1)) }, unix.EEXIST},
		{"a second real server", func(f *FakeIPVS) error { return f.NewDestination(vs(), rs("10.244.2.7", 1)) }, nil},
		{"quiesce the first", func(f *FakeIPVS) error { return f.UpdateDestination(vs(), rs("10.244.1.5", 0)) }, nil},
		{"update a missing real server", func(f *FakeIPVS) error { return f.UpdateDestination(vs(), rs("10.244.9.9", 0)) }, unix.ENOENT},
		{"delete a missing real server", func(f *FakeIPVS) error { return f.DelDestination(vs(), rs("10.244.9.9", 1)) }, unix.ENOENT},
		{"delete the second", func(f *FakeIPVS) error { return f.DelDestination(vs(), rs("10.244.2.7", 1)) }, nil},
	}
	f := NewFakeIPVS()
	for _, c := range calls {
		if err := c.do(f); !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	want := "TCP 10.96.0.10:80 rr\n  -> 10.244.1.5:8080 weight 0"
	if d := cmp.Diff(want, f.Dump()); d != "" {
		t.Errorf("Dump (-want +got):\n%s", d)
	}
	if got := f.Calls(); got != len(calls) {
		t.Errorf("Calls() = %d, want %d", got, len(calls))
	}
	if !f.SetConnections(netip.MustParseAddrPort("10.96.0.10:80"), "TCP", netip.MustParseAddrPort("10.244.1.5:8080"), 2, 1) {
		t.Fatal("SetConnections found no such real server")
	}
	dests, err := f.GetDestinations(vs())
	if err != nil {
		t.Fatal(err)
	}
	if len(dests) != 1 || dests[0].ActiveConnections != 2 || dests[0].InactiveConnections != 1 {
		t.Errorf("GetDestinations = %+v, want one real server with 2 active and 1 inactive connections", dests)
	}
}

// TestFakeNetlinkAnswersAsTheKernel checks links, addresses and ipsets.
func TestFakeNetlinkAnswersAsTheKernel(t *testing.T) {
	f := NewFakeNetlink()
	dummy := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "kube-ipvs0"}}
	if _, err := f.LinkByName("kube-ipvs0"); err == nil {
		t.Error("LinkByName of a missing link succeeded")
	}
	if err := f.LinkAdd(dummy); err != nil {
		t.Fatal(err)
	}
	if err := f.LinkAdd(dummy); !errors.Is(err, unix.EEXIST) {
		t.Errorf("LinkAdd of an existing link: %v, want EEXIST", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.96.0.10").To4(), Mask: net.CIDRMask(32, 32)}}
	if err := f.AddrAdd(dummy, addr); err != nil {
		t.Fatal(err)
	}
	if err := f.AddrAdd(dummy, addr); !errors.Is(err, unix.EEXIST) {
		t.Errorf("AddrAdd of a bound address: %v, want EEXIST", err)
	}
	if d := cmp.Diff([]netip.Addr{netip.MustParseAddr("10.96.0.10")}, f.LinkAddrs("kube-ipvs0"), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("LinkAddrs (-want +got):\n%s", d)
	}

	if err := f.IpsetCreate("KUBE-CLUSTER-IP", "hash:ip,port", netlink.IpsetCreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.IpsetCreate("KUBE-CLUSTER-IP", "hash:ip,port", netlink.IpsetCreateOptions{}); !errors.Is(err, unix.EEXIST) {
		t.Errorf("IpsetCreate of an existing set: %v, want EEXIST", err)
	}
	entry := &netlink.IPSetEntry{IP: net.ParseIP("10.96.0.10").To4(), Port: ptr(uint16(80)), Protocol: ptr(uint8(unix.IPPROTO_TCP))}
	if err := f.IpsetAdd("KUBE-CLUSTER-IP", entry); err != nil {
		t.Fatal(err)
	}
	if err := f.IpsetDel("KUBE-CLUSTER-IP", &netlink.IPSetEntry{IP: net.ParseIP("10.96.0.11").To4(), Port: ptr(uint16(80)), Protocol: ptr(uint8(unix.IPPROTO_TCP))}); err == nil {
		t.Error("IpsetDel of a missing member succeeded")
	}
	if d := cmp.Diff(map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"}}, f.Sets()); d != "" {
		t.Errorf("Sets (-want +got):\n%s", d)
	}
}

func ptr[T any](v T) *T { return &v }
