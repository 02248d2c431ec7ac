package ipvs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Dataplane programs States into the kernel's IPVS table, a dummy link,
// ipsets and a few iptables chains. Its methods are safe for concurrent
// use; they are serialized, as moby/ipvs handles must be.
type Dataplane struct {
	cfg    Config
	ipv6   bool
	log    logr.Logger
	ipvs   handle.IPVS
	nl     handle.Netlink
	runner xtables.Runner
	sysctl sysctl.Interface
	names  names

	mu sync.Mutex
	// valid is set while the memory below is what the kernel holds, as the
	// last Sync left it; a failure clears it and the next Sync is a full
	// one.
	valid bool
	last  *dataplane.State
	progs map[types.NamespacedName]*program
	// owner is the service each programmed virtual server belongs to.
	owner map[vsKey]types.NamespacedName
	// binds, entries and internal count the services that need each
	// address on the link, each set member and each rule of the INTERNAL
	// chain.
	binds    map[netip.Addr]int
	entries  map[setEntry]int
	internal map[string]int
	// addrs are the node's addresses the last full sync read; partial
	// syncs use them, and KernelChanged compares the kernel's with them.
	addrs nodeAddrs
	// draining holds the deadline of each real server at weight 0.
	draining map[drainKey]time.Time
	// rules is the iptables input last written but the INTERNAL chain's
	// rules, internalText those; listed is the chains as listed right
	// after.
	rules        string
	internalText string
	listed       xtables.Listing
	prepared     bool
	report       dataplane.SyncReport
	// table reads the IPVS table for the canary, gen the iptables rules'
	// generation (nil when the kernel or backend has none) and rulesSum
	// their fingerprint; canary is what they said after the last write.
	table    func() ([]byte, error)
	gen      func(context.Context) (uint32, error)
	rulesSum func(context.Context, *xtables.OwnedChains) (uint64, error)
	canary   canary
}

type drainKey struct {
	vs   vsKey
	dest netip.AddrPort
}

// New returns a Dataplane for cfg. Without Config.Kernel it opens the
// kernel's IPVS in the calling thread's network namespace, and fails with
// an error wrapping ErrNoIPVS when the kernel has none; nothing is
// programmed before the first Sync.
func New(cfg Config) (*Dataplane, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	d := &Dataplane{
		cfg:      cfg,
		ipv6:     cfg.Family == v1.IPv6Protocol,
		log:      cfg.Logger.WithValues("dataplane", "ipvs", "ipFamily", cfg.Family),
		runner:   cfg.Runner,
		sysctl:   cfg.Sysctl,
		draining: map[drainKey]time.Time{},
	}
	d.names = newNames(cfg.Prefix, d.ipv6)
	d.reset()
	if cfg.Kernel == nil {
		k, err := OpenKernel()
		if err != nil {
			return nil, fmt.Errorf("ipvs: %w", err)
		}
		d.cfg.Kernel = k
	}
	h := d.cfg.Kernel.Handles()
	d.ipvs, d.nl, d.table = h.IPVS, h.Netlink, h.Table
	if d.sysctl == nil {
		if h.Fake {
			d.sysctl = sysctl.NewFake(nil)
		} else {
			d.sysctl = sysctl.Proc{}
		}
	}
	if d.runner == nil {
		r, err := xtables.NewExecRunner(xtables.ExecConfig{Family: cfg.Family})
		if err != nil {
			return nil, fmt.Errorf("ipvs: %w", err)
		}
		d.runner = r
	}
	d.gen, d.rulesSum = xtables.GenerationOf(d.runner), xtables.SumOf(d.runner)
	return d, nil
}

func (d *Dataplane) reset() {
	d.valid, d.last = false, nil
	d.progs = map[types.NamespacedName]*program{}
	d.owner = map[vsKey]types.NamespacedName{}
	d.binds = map[netip.Addr]int{}
	d.entries = map[setEntry]int{}
	d.internal = map[string]int{}
	d.addrs = nodeAddrs{}
	d.rules, d.internalText, d.listed = "", "", nil
}

// Name implements dataplane.Dataplane.
func (d *Dataplane) Name() string { return "ipvs" }

// LastSync implements dataplane.SyncReporter. Bytes is the iptables input
// written, if any.
func (d *Dataplane) LastSync() dataplane.SyncReport { return backend.Locked(&d.mu, &d.report) }

// Sync implements dataplane.Dataplane: a full diff against the kernel's
// IPVS table, link and ipsets on the first Sync, after a failure and when
// the State cannot say what changed; otherwise only the services
// State.ChangedSince names, each compared with the kernel's real servers
// of its virtual servers.
func (d *Dataplane) Sync(ctx context.Context, s *dataplane.State) error {
	if err := backend.CheckState("ipvs", d.cfg.Family, s); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	// Before drain, the dataplane's own change to the table.
	var keep moved
	if d.valid && d.last != nil {
		keep = d.canaryMoved(ctx)
	}
	d.drain()
	var changed []types.NamespacedName
	full := !d.valid || d.last == nil || d.last.Settings.MasqueradeAll != s.Settings.MasqueradeAll ||
		d.last.Settings.LocalDetector.Mode != s.Settings.LocalDetector.Mode ||
		!slices.Equal(d.last.Settings.NodePortAddresses, s.Settings.NodePortAddresses)
	if !full {
		full = d.rulesText(s) != d.rules
	}
	if !full {
		set, ok := s.ChangedFrom(d.last)
		full = !ok
		changed = slices.SortedFunc(maps.Keys(set), servicemodel.CompareNames)
	}
	var err error
	var report dataplane.SyncReport
	if full {
		_, report, err = d.fullSync(ctx, s)
	} else {
		report, err = d.partialSync(ctx, s, changed)
	}
	if err != nil {
		d.valid = false
		return fmt.Errorf("ipvs: %w", err)
	}
	d.valid, d.last, d.report = true, s, report
	if full {
		// A full sync diffed everything: it repaired what moved.
		keep = moved{}
	}
	d.noteCanary(ctx, keep)
	d.log.V(2).Info("Synced", "full", report.Full, "services", report.Services)
	return nil
}

// prepare sets the sysctls and timeouts once, and makes sure the link
// exists.
func (d *Dataplane) prepare() (netlink.Link, error) {
	if !d.prepared {
		for _, sc := range d.sysctls() {
			if cur, err := d.sysctl.Get(sc.name); err == nil && cur == sc.value {
				continue
			}
			if err := d.sysctl.Set(sc.name, sc.value); err != nil {
				return nil, fmt.Errorf("set sysctl %s=%s: %w", sc.name, sc.value, err)
			}
		}
		c := d.cfg
		if c.TCPTimeout > 0 || c.TCPFinTimeout > 0 || c.UDPTimeout > 0 {
			if err := d.ipvs.SetConfig(&mobyipvs.Config{TimeoutTCP: c.TCPTimeout, TimeoutTCPFin: c.TCPFinTimeout, TimeoutUDP: c.UDPTimeout}); err != nil {
				return nil, fmt.Errorf("set IPVS timeouts: %w", err)
			}
		}
		d.prepared = true
	}
	link, err := d.nl.LinkByName(d.cfg.Link)
	if err == nil {
		return link, nil
	}
	var nf netlink.LinkNotFoundError
	if !errors.As(err, &nf) {
		return nil, fmt.Errorf("find link %s: %w", d.cfg.Link, err)
	}
	link = &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: d.cfg.Link}}
	if err := d.nl.LinkAdd(link); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("create dummy link %s: %w", d.cfg.Link, withModuleHint(err, "dummy"))
	}
	if link, err = d.nl.LinkByName(d.cfg.Link); err != nil {
		return nil, fmt.Errorf("find link %s: %w", d.cfg.Link, err)
	}
	return link, nil
}

type sysctlValue struct{ name, value string }

// sysctls are the settings IPVS mode needs; see the package
// documentation.
func (d *Dataplane) sysctls() []sysctlValue {
	out := []sysctlValue{
		{"net/ipv4/vs/conntrack", "1"},
		{"net/ipv4/vs/expire_nodest_conn", "1"},
		{"net/ipv4/vs/expire_quiescent_template", "1"},
		{"net/ipv4/ip_forward", "1"},
	}
	if d.ipv6 {
		out = append(out, sysctlValue{"net/ipv6/conf/all/forwarding", "1"})
	}
	if d.cfg.StrictARP {
		out = append(out, sysctlValue{"net/ipv4/conf/all/arp_ignore", "1"}, sysctlValue{"net/ipv4/conf/all/arp_announce", "2"})
	}
	return out
}

// service returns the moby/ipvs service of vs.
func (d *Dataplane) service(k vsKey, flags, timeout uint32) *mobyipvs.Service {
	s := &mobyipvs.Service{
		Address: net.IP(k.addr.AsSlice()), Protocol: k.proto, Port: k.port,
		SchedName: d.cfg.Scheduler, Flags: flags, Timeout: timeout,
		AddressFamily: unix.AF_INET, Netmask: 0xffffffff,
	}
	if d.ipv6 {
		s.AddressFamily, s.Netmask = unix.AF_INET6, 128
	}
	return s
}

func destination(ap netip.AddrPort, weight int) *mobyipvs.Destination {
	return &mobyipvs.Destination{Address: net.IP(ap.Addr().AsSlice()), Port: ap.Port(), Weight: weight,
		ConnectionFlags: mobyipvs.ConnectionFlagMasq}
}

func destAddr(dst *mobyipvs.Destination) netip.AddrPort {
	a, _ := netip.AddrFromSlice(dst.Address)
	return netip.AddrPortFrom(a.Unmap(), dst.Port)
}

func keyOfService(s *mobyipvs.Service) vsKey {
	a, _ := netip.AddrFromSlice(s.Address)
	return vsKey{a.Unmap(), s.Protocol, s.Port}
}

// syncVS makes the kernel's virtual server k what want says, given the
// kernel's (nil when absent); it returns what it changed.
func (d *Dataplane) syncVS(k vsKey, kernel *mobyipvs.Service, want *virtualServer) ([]string, error) {
	svc := d.service(k, want.flags, want.timeout)
	if kernel == nil {
		err := d.ipvs.NewService(svc)
		if err == nil {
			changes := []string{fmt.Sprintf("virtual server %s: created", k)}
			for _, ap := range want.dests {
				if err := d.ipvs.NewDestination(svc, destination(ap, 1)); err != nil && !errors.Is(err, unix.EEXIST) {
					return changes, fmt.Errorf("add real server %s to %s: %w", ap, k, err)
				}
			}
			return changes, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create virtual server %s: %w", k, err)
		}
		kernel = &mobyipvs.Service{SchedName: "?"}
	}
	var changes []string
	if kernel.SchedName != svc.SchedName || kernel.Flags&^handle.FlagHashed != svc.Flags || kernel.Timeout != svc.Timeout {
		if err := d.ipvs.UpdateService(svc); err != nil {
			return nil, fmt.Errorf("update virtual server %s: %w", k, err)
		}
		changes = append(changes, fmt.Sprintf("virtual server %s: options updated", k))
	}
	have, err := d.ipvs.GetDestinations(svc)
	if err != nil {
		return changes, fmt.Errorf("list real servers of %s: %w", k, err)
	}
	more, err := d.syncDests(k, svc, have, want.dests)
	return append(changes, more...), err
}

// syncDests makes the real servers of k want, given the kernel's have: a
// real server no longer wanted is drained (weight 0) while it has active
// TCP connections, deleted otherwise.
func (d *Dataplane) syncDests(k vsKey, svc *mobyipvs.Service, have []*mobyipvs.Destination, want []netip.AddrPort) ([]string, error) {
	var changes []string
	seen := map[netip.AddrPort]bool{}
	for _, h := range have {
		ap := destAddr(h)
		seen[ap] = true
		if _, ok := slices.BinarySearchFunc(want, ap, netip.AddrPort.Compare); ok {
			delete(d.draining, drainKey{k, ap})
			if h.Weight != 1 || h.ConnectionFlags&mobyipvs.ConnectionFlagFwdMask != mobyipvs.ConnectionFlagMasq {
				if err := d.ipvs.UpdateDestination(svc, destination(ap, 1)); err != nil {
					return changes, fmt.Errorf("update real server %s of %s: %w", ap, k, err)
				}
				changes = append(changes, fmt.Sprintf("virtual server %s: real server %s set to weight 1", k, ap))
			}
			continue
		}
		if _, ok := d.draining[drainKey{k, ap}]; ok {
			continue
		}
		if err := d.removeDest(k, svc, h); err != nil {
			return changes, err
		}
		changes = append(changes, fmt.Sprintf("virtual server %s: real server %s removed", k, ap))
	}
	for _, ap := range want {
		if seen[ap] {
			continue
		}
		if err := d.ipvs.NewDestination(svc, destination(ap, 1)); err != nil && !errors.Is(err, unix.EEXIST) {
			return changes, fmt.Errorf("add real server %s to %s: %w", ap, k, err)
		}
		changes = append(changes, fmt.Sprintf("virtual server %s: real server %s added", k, ap))
	}
	return changes, nil
}

// removeDest starts graceful termination of a TCP real server with active
// connections and deletes any other at once.
func (d *Dataplane) removeDest(k vsKey, svc *mobyipvs.Service, h *mobyipvs.Destination) error {
	ap := destAddr(h)
	if k.proto == unix.IPPROTO_TCP && h.ActiveConnections > 0 {
		if h.Weight != 0 {
			if err := d.ipvs.UpdateDestination(svc, destination(ap, 0)); err != nil {
				return fmt.Errorf("quiesce real server %s of %s: %w", ap, k, err)
			}
		}
		d.draining[drainKey{k, ap}] = d.cfg.Clock.Now().Add(d.cfg.DrainTimeout)
		d.log.V(4).Info("Draining real server", "virtualServer", k.String(), "realServer", ap, "activeConnections", h.ActiveConnections)
		return nil
	}
	if err := d.ipvs.DelDestination(svc, h); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete real server %s of %s: %w", ap, k, err)
	}
	return nil
}

// drain deletes the draining real servers whose connections are gone or
// whose time is up: one dump per virtual server with draining real
// servers, never a wait. Errors are logged; the next call retries.
func (d *Dataplane) drain() {
	byVS := map[vsKey][]netip.AddrPort{}
	for k := range d.draining {
		byVS[k.vs] = append(byVS[k.vs], k.dest)
	}
	now := d.cfg.Clock.Now()
	for k, dests := range byVS {
		svc := d.service(k, 0, 0)
		have, err := d.ipvs.GetDestinations(svc)
		if err != nil {
			// The virtual server is gone, and its real servers with it.
			for _, ap := range dests {
				delete(d.draining, drainKey{k, ap})
			}
			continue
		}
		for _, ap := range dests {
			dk := drainKey{k, ap}
			i := slices.IndexFunc(have, func(h *mobyipvs.Destination) bool { return destAddr(h) == ap })
			if i < 0 {
				delete(d.draining, dk)
				continue
			}
			if have[i].ActiveConnections > 0 && now.Before(d.draining[dk]) {
				continue
			}
			if err := d.ipvs.DelDestination(svc, have[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				d.log.Error(err, "Deleting a drained real server", "virtualServer", k.String(), "realServer", ap)
				continue
			}
			delete(d.draining, dk)
		}
	}
}

// Draining returns the real servers at weight 0 waiting for their
// connections to end, as "TCP 10.96.0.1:80 -> 10.1.0.1:8080", sorted.
func (d *Dataplane) Draining() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for k := range d.draining {
		out = append(out, k.vs.String()+" -> "+k.dest.String())
	}
	slices.Sort(out)
	return out
}
