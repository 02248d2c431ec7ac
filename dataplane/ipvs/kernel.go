package ipvs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Kernel is the IPVS table, links and ipsets of one network namespace,
// which a Dataplane programs and reads: OpenKernel opens the calling
// thread's; package ipvstest's Kernel keeps fakes of them in memory. Its
// method hands the dataplane its handles, of internal types: a program
// gets a Kernel from one of those two.
type Kernel interface {
	Handles() handle.Handles
}

// HostKernel is the kernel of one of this host's network namespaces,
// reached through the sockets OpenKernel opened there; Close closes them.
type HostKernel struct {
	ipvs *mobyipvs.Handle
	nl   *netlink.Handle
	// table is /proc/net/ip_vs of the namespace OpenKernel opened, kept
	// open so that any thread reads that namespace's (nil if it could
	// not be opened); buf is its last reading.
	mu    sync.Mutex
	table *os.File
	buf   []byte
}

// Handles implements Kernel.
func (k *HostKernel) Handles() handle.Handles {
	h := handle.Handles{IPVS: k.ipvs, Netlink: k.nl}
	if k.table != nil {
		h.Table = k.readTable
	}
	return h
}

// readTable reads the whole of /proc/net/ip_vs again, into a buffer it
// reuses, and hands it to scan.
func (k *HostKernel) readTable(scan func([]byte)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, err := k.table.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("read /proc/net/ip_vs: %w", err)
	}
	k.buf = k.buf[:0]
	for {
		if len(k.buf) == cap(k.buf) {
			k.buf = append(k.buf, 0)[:len(k.buf)]
		}
		n, err := k.table.Read(k.buf[len(k.buf):cap(k.buf)])
		k.buf = k.buf[:len(k.buf)+n]
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			scan(k.buf)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read /proc/net/ip_vs: %w", err)
		}
	}
}

// Close closes the kernel's sockets; a Dataplane on it fails from then
// on.
func (k *HostKernel) Close() {
	k.ipvs.Close()
	k.nl.Close()
	if k.table != nil {
		k.table.Close()
	}
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

// OpenKernel opens the kernel of the calling thread's network namespace,
// as IPVS and netlink handles: moby/ipvs's handle (which tries "modprobe ip_vs"),
// then Probe, so that a kernel without IPVS fails with ErrNoIPVS, then a
// netlink handle of the two families the dataplane uses, route (its link
// and addresses) and netfilter (its ipsets), and only those: a kernel
// without xfrm_user, say, does not stop it. A missing module is named in
// the error, with the modprobe line that loads it.
func OpenKernel() (*HostKernel, error) {
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("open IPVS: %w", err)
	}
	if err := Probe(); err != nil {
		h.Close()
		return nil, err
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER)
	if err != nil {
		h.Close()
		if errors.Is(err, unix.EPROTONOSUPPORT) {
			// Route netlink is always there: netfilter's is nfnetlink, a
			// dependency of ip_set.
			return nil, fmt.Errorf("open netlink (route and netfilter): %w: the kernel has no netfilter netlink; load it with modprobe ip_set", err)
		}
		return nil, fmt.Errorf("open netlink (route and netfilter): %w", err)
	}
	if _, _, err := nl.IpsetProtocol(); err != nil {
		h.Close()
		nl.Close()
		return nil, fmt.Errorf("ask ipset its protocol version: %w: the kernel has no ipset; load it with modprobe ip_set", err)
	}
	k := &HostKernel{ipvs: h, nl: nl}
	// thread-self: the calling thread's namespace, which may not be the
	// process's.
	if f, err := os.Open("/proc/thread-self/net/ip_vs"); err == nil {
		k.table = f
	}
	return k, nil
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
