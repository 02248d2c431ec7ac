package ipvs

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// IPVS is the part of github.com/moby/ipvs's *Handle the dataplane uses:
// every call is one netlink round trip (a dump for the Get methods). A
// *FakeIPVS implements it without a kernel.
type IPVS interface {
	GetServices() ([]*mobyipvs.Service, error)
	NewService(*mobyipvs.Service) error
	UpdateService(*mobyipvs.Service) error
	DelService(*mobyipvs.Service) error
	GetDestinations(*mobyipvs.Service) ([]*mobyipvs.Destination, error)
	NewDestination(*mobyipvs.Service, *mobyipvs.Destination) error
	UpdateDestination(*mobyipvs.Service, *mobyipvs.Destination) error
	DelDestination(*mobyipvs.Service, *mobyipvs.Destination) error
	SetConfig(*mobyipvs.Config) error
}

// Netlink is the part of github.com/vishvananda/netlink's *Handle the
// dataplane uses for its dummy link, the link's addresses and its ipsets.
// A *netlink.Handle implements it, and so does a *FakeNetlink.
type Netlink interface {
	LinkByName(name string) (netlink.Link, error)
	LinkAdd(link netlink.Link) error
	LinkDel(link netlink.Link) error
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	AddrAdd(link netlink.Link, addr *netlink.Addr) error
	AddrDel(link netlink.Link, addr *netlink.Addr) error
	IpsetCreate(name, typename string, options netlink.IpsetCreateOptions) error
	IpsetDestroy(name string) error
	IpsetList(name string) (*netlink.IPSetResult, error)
	IpsetAdd(name string, entry *netlink.IPSetEntry) error
	IpsetDel(name string, entry *netlink.IPSetEntry) error
}

// ErrNoIPVS is wrapped by the error of Probe, and of New when it opens
// the kernel's IPVS itself, on a kernel without the ip_vs module.
var ErrNoIPVS = errors.New("this kernel has no ip_vs module")

// Probe reports whether the kernel of the calling thread's network
// namespace has IPVS: the ip_vs module loaded, so that its generic
// netlink family "IPVS" is registered. github.com/moby/ipvs cannot tell
// (without the module its calls are silently ignored), so a program checks
// this before programming anything. Probe loads nothing (moby/ipvs's
// handle runs "modprobe ip_vs" when it opens); the error wraps ErrNoIPVS
// when the module is missing.
func Probe() error {
	if _, err := netlink.GenlFamilyGet("IPVS"); err != nil {
		return fmt.Errorf("%w: the generic netlink family IPVS is not registered (%v); load it with modprobe ip_vs, or use another proxy mode", ErrNoIPVS, err)
	}
	return nil
}

// OpenKernel opens IPVS and netlink handles in the calling thread's
// network namespace: moby/ipvs's handle (which tries "modprobe ip_vs"),
// then Probe, so that a kernel without IPVS fails with ErrNoIPVS, then a
// netlink handle of the two families the dataplane uses, route (its link
// and addresses) and netfilter (its ipsets), and only those: a kernel
// without xfrm_user, say, does not stop it. A missing module is named in
// the error, with the modprobe line that loads it.
func OpenKernel() (*mobyipvs.Handle, *netlink.Handle, error) {
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, nil, fmt.Errorf("open IPVS: %w", err)
	}
	if err := Probe(); err != nil {
		h.Close()
		return nil, nil, err
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER)
	if err != nil {
		h.Close()
		if errors.Is(err, unix.EPROTONOSUPPORT) {
			// Route netlink is always there: netfilter's is nfnetlink, a
			// dependency of ip_set.
			return nil, nil, fmt.Errorf("open netlink (route and netfilter): %w: the kernel has no netfilter netlink; load it with modprobe ip_set", err)
		}
		return nil, nil, fmt.Errorf("open netlink (route and netfilter): %w", err)
	}
	if _, _, err := nl.IpsetProtocol(); err != nil {
		h.Close()
		nl.Close()
		return nil, nil, fmt.Errorf("ask ipset its protocol version: %w: the kernel has no ipset; load it with modprobe ip_set", err)
	}
	return h, nl, nil
}

// withModuleHint adds to err, a kernel's answer to what needed module
// (one of the modules of the package documentation's "Without a kernel")
// does, the module and the modprobe line that loads it, when err says it
// is missing.
func withModuleHint(err error, module string) error {
	switch {
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EPROTONOSUPPORT), errors.Is(err, syscall.Errno(nl.IPSET_ERR_FIND_TYPE)):
		return fmt.Errorf("%w: the kernel lacks %s; load it with modprobe %s", err, module, module)
	}
	return err
}

// setTypeModule is the module of an ipset type: "hash:ip,port" is
// ip_set_hash_ipport.
func setTypeModule(typ string) string {
	return "ip_set_" + strings.ReplaceAll(strings.ReplaceAll(typ, ":", "_"), ",", "")
}
