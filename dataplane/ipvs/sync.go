package ipvs

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
//
// A Sync passes through three stages, one file each: the desired table
// from the State (desired.go), the difference from what is programmed
// (diff.go) and the calls that apply it (apply.go); the iptables rules,
// which change only with the settings and the INTERNAL chain, are
// rules.go's.
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
	// valid is set while the kernel holds what the desired table says, as
	// the last Sync left it; a failure clears it and the next Sync is a
	// full one.
	valid bool
	// last is the State of the last successful Sync, and rulesKey what
	// its settings made of the iptables rules.
	last     *dataplane.State
	rulesKey rulesKey

	// The desired table (desired.go): what desired, the State it was
	// last brought to, needs on a node with addrs. progs are the
	// services' programs; owner is the service each virtual server
	// belongs to (and its program's virtual server), rivals the others
	// that want it; binds, entries and
	// internal count the services that need each address on the link,
	// each set member and each rule of the INTERNAL chain.
	desired  *dataplane.State
	addrs    nodeAddrs
	progs    map[types.NamespacedName]*program
	owner    map[vsKey]owning
	rivals   map[vsKey][]types.NamespacedName
	binds    map[netip.Addr]int
	entries  map[memberKey]int32
	internal map[string]int
	// expect is the fingerprint (fingerprint.go) the kernel's table has of
	// the desired virtual servers, their draining real servers included,
	// and expectOpts that of their options; setSums and setLens are the
	// fingerprint and the size of each set's members (IPS's also those of
	// the addresses on the link).
	expect, expectOpts uint64
	setSums            [numSets]uint64
	setLens            [numSets]int

	// draining holds the deadline of each real server at weight 0, and
	// drainSums their fingerprints by virtual server.
	draining  map[drainKey]time.Time
	drainSums map[vsKey]drainSum
	// link is the dummy link, once a Sync looked it up.
	link netlink.Link
	// msgs are the messages the apply stage reuses.
	msgs messages
	// rules is the iptables input last written but the INTERNAL chain's
	// rules, internalText those; listed is the chains as listed right
	// after.
	rules        string
	internalText string
	listed       xtables.Listing
	prepared     bool
	report       dataplane.SyncReport
	// table reads the IPVS table, gen the iptables rules' generation (nil
	// when the kernel or backend has none) and rulesSum their
	// fingerprint; canary is what the rules' said after the last write.
	table    func(scan func([]byte)) error
	gen      func(context.Context) (uint32, error)
	rulesSum func(context.Context, *xtables.OwnedChains) (uint64, error)
	canary   canary
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
		cfg:       cfg,
		ipv6:      cfg.Family == v1.IPv6Protocol,
		log:       cfg.Logger.WithValues("dataplane", "ipvs", "ipFamily", cfg.Family),
		runner:    cfg.Runner,
		sysctl:    cfg.Sysctl,
		draining:  map[drainKey]time.Time{},
		drainSums: map[vsKey]drainSum{},
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
	d.valid, d.last, d.link = false, nil, nil
	d.resetTable(tableSize{})
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
// the settings the rules follow changed; otherwise only the services
// State.ChangedFrom names, each compared with what was programmed. Either
// way the desired table is brought to s service by service: only a State
// that cannot say what changed since the last one rebuilds it whole.
func (d *Dataplane) Sync(ctx context.Context, s *dataplane.State) error {
	if err := backend.CheckState("ipvs", d.cfg.Family, s); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	keep := d.valid && d.rulesMoved(ctx)
	d.drain()
	names, known := d.changedNames(s)
	rk := rulesKeyOf(s)
	full := !d.valid || !known || d.last == nil || rk != d.rulesKey ||
		!slices.Equal(d.last.Settings.NodePortAddresses, s.Settings.NodePortAddresses)
	var err error
	var report dataplane.SyncReport
	if full {
		_, report, err = d.fullSync(ctx, s, false)
	} else {
		report, err = d.partialSync(ctx, s, names)
	}
	if err != nil {
		d.valid = false
		return fmt.Errorf("ipvs: %w", err)
	}
	d.valid, d.last, d.rulesKey, d.report = true, s, rk, report
	// A full sync rewrote the rules where they moved.
	d.noteCanary(ctx, keep && !full)
	d.log.V(2).Info("Synced", "full", report.Full, "services", report.Services)
	return nil
}

// changedNames returns the services whose programs may differ between the
// desired table and s, sorted; known is false when s cannot tell, and
// the table must be rebuilt.
func (d *Dataplane) changedNames(s *dataplane.State) (names []types.NamespacedName, known bool) {
	if s == d.desired {
		return nil, d.desired != nil
	}
	set, ok := s.ChangedFrom(d.desired)
	if !ok {
		return nil, false
	}
	return slices.SortedFunc(maps.Keys(set), servicemodel.CompareNames), true
}

// fullSync brings the desired table to s and diffs everything the
// dataplane owns in the kernel against it, changing only the difference;
// it returns what it changed when asked to record it. It reads the
// family's addresses (one dump), the sets (one listing each), the
// virtual servers (one dump) and the table (one read of /proc/net/ip_vs),
// then dumps the real servers of the virtual servers whose fingerprint
// differs, and makes one call per difference.
func (d *Dataplane) fullSync(ctx context.Context, s *dataplane.State, record bool) ([]string, dataplane.SyncReport, error) {
	report := dataplane.SyncReport{Full: true}
	link, err := d.prepare()
	if err != nil {
		return nil, report, err
	}
	ka, err := d.readAddrs(link.Attrs().Index)
	if err != nil {
		return nil, report, err
	}
	addrs := nodeAddrsOf(s, ka.local, d.ipv6)
	names, known := d.changedNames(s)
	d.desire(s, addrs, names, !known || !addrs.equal(d.addrs), nil)
	report.Services = len(d.progs)
	k := &kernelReading{link: ka.link}
	if k.sets, err = d.readSets(); err != nil {
		return nil, report, err
	}
	p, err := d.kernelPlan(k)
	if err != nil {
		return nil, report, err
	}
	log := &changeLog{on: record}
	if err := d.apply(p, func() (netlink.Link, error) { return link, nil }, log); err != nil {
		return log.list, report, err
	}
	n, more, err := d.syncRules(ctx, s, internalText(d.internal))
	report.Bytes = n
	return append(log.list, more...), report, err
}

// partialSync brings the desired table to s for the services in names
// and applies the difference: for each virtual server that differs, one
// dump of its real servers and one call per difference; for each address
// or set member that appears or goes, one call; one restore of the
// INTERNAL chain when its rules changed. It reads nothing else.
func (d *Dataplane) partialSync(ctx context.Context, s *dataplane.State, names []types.NamespacedName) (dataplane.SyncReport, error) {
	report := dataplane.SyncReport{}
	if len(names) == 0 {
		d.desired = s
		return report, nil
	}
	dl := newDelta()
	d.desire(s, d.addrs, names, false, dl)
	report.Services = dl.services
	p := d.partialPlan(dl)
	if err := d.apply(p, d.linkOnce, &changeLog{}); err != nil {
		return report, err
	}
	if p.internal {
		n, err := d.syncInternal(ctx)
		if err != nil {
			return report, err
		}
		report.Bytes = n
	}
	return report, nil
}

// linkOnce returns the dummy link, looked up (and created when missing)
// at most once per Dataplane until a full sync looks again.
func (d *Dataplane) linkOnce() (netlink.Link, error) {
	if d.link != nil {
		return d.link, nil
	}
	return d.prepare()
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
		d.link = link
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
	d.link = link
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
