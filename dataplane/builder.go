package dataplane

import (
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/logtext"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
)

// BuilderConfig configures a Builder. The zero value builds IPv4 States for
// a node with no name, with default Settings.
type BuilderConfig struct {
	// Families are the IP families to build States for; nil means IPv4.
	Families []v1.IPFamily
	// NodeName is this node's name: endpoints on it are local, and the Node
	// object of that name supplies zone, IPs and pod CIDRs.
	NodeName string
	// ProxyName is passed to servicemodel.Config.ProxyName.
	ProxyName string
	// Settings are copied into every State; per-family CIDR lists are
	// filtered to the State's family (see Settings.NodePortAddresses).
	// Check them with Settings.Validate first: every dataplane of this
	// module refuses the States of Settings it refuses, and NewBuilder
	// logs why.
	Settings Settings
	// Logger receives why objects or parts of them were skipped; the zero
	// value (logr.Discard()) logs nothing.
	Logger logr.Logger
	// OnSkip, if set, is called with the kind ("Service", "EndpointSlice",
	// "Node", "ServiceCIDR") and a short reason (a servicemodel Reason, an
	// endpoints Skip reason, or SkipNodeAddress / SkipPodCIDR /
	// SkipServiceCIDR) whenever an object or part
	// of one is skipped as invalid. Services that are not proxied by design
	// (headless, ExternalName, another proxy's or another family's) are not
	// reported, and a bad Service is reported once, not once per family.
	OnSkip func(kind, reason string)
}

// Builder turns Services, EndpointSlices and this Node into one State per IP
// family. Update methods may be called from any goroutine; Build must not be
// called concurrently with itself.
//
// Each family has its own servicemodel.Tracker and endpoints.Tracker, so a
// Build costs O(changes since the previous Build): the States share
// everything unchanged with their predecessors.
type Builder struct {
	// id tells this Builder's States from another's (State.ChangedFrom):
	// generations count per Builder.
	id       *byte
	nodeName string
	mode     LocalMode
	logger   logr.Logger
	onSkip   func(kind, reason string)
	families []*familyBuilder

	// svcMu serializes UpdateService, so that svcSkips tallies one update.
	svcMu    sync.Mutex
	svcSkips []map[string]int

	mu sync.Mutex
	// nodeDirty: the node changed since the last Build; nodeFull: the
	// change affects every service, so the next States cannot list what
	// changed. nodeSeen: UpdateNode has had this node.
	nodeDirty, nodeFull, nodeSeen bool
	zone                          string
	// serviceCIDRs holds the CIDRs of every ServiceCIDR object by name;
	// cidrsDirty: they changed since the last Build.
	serviceCIDRs map[string][]netip.Prefix
	cidrsDirty   bool

	// gen is the Generation of the last Build, and claims what the
	// services of that Build claim; only Build touches them.
	gen    uint64
	claims claims
}

// familyBuilder is the part of a Builder for one IP family.
type familyBuilder struct {
	family    v1.IPFamily
	settings  Settings
	services  *servicemodel.Tracker
	endpoints *endpoints.Tracker
	// ips and podCIDRs are this node's, guarded by Builder.mu. They are
	// replaced, never modified, as States share them.
	ips      []netip.Addr
	podCIDRs []netip.Prefix
	// applied is the services of the last Build; only Build touches it.
	applied servicemodel.Map
}

// Reasons the Builder passes to BuilderConfig.OnSkip for a Node ("Node"
// kind). Services and EndpointSlices are reported with the reasons of
// servicemodel and endpoints.
const (
	SkipNodeAddress = "invalid node address"
	SkipPodCIDR     = "invalid pod CIDR"
	// SkipServiceCIDR is reported with the "ServiceCIDR" kind.
	SkipServiceCIDR = "invalid service CIDR"
)

// NewBuilder returns a Builder with one servicemodel.Tracker and one
// endpoints.Tracker per family. Unknown and repeated families are ignored
// (and logged), and so, once, is a family ClusterCIDR detection has no
// CIDR of.
func NewBuilder(cfg BuilderConfig) *Builder {
	b := &Builder{
		id:       new(byte),
		nodeName: cfg.NodeName,
		mode:     cfg.Settings.LocalDetector.Mode,
		logger:   cfg.Logger,
		onSkip:   cfg.OnSkip,
	}
	if err := cfg.Settings.Validate(); err != nil {
		b.logger.Error(err, "Invalid settings: every dataplane will refuse the States built with them")
	}
	families := cfg.Families
	if families == nil {
		families = []v1.IPFamily{v1.IPv4Protocol}
	}
	for _, f := range families {
		if f != v1.IPv4Protocol && f != v1.IPv6Protocol {
			b.logger.Error(nil, "Ignoring unknown IP family", "family", logtext.String(string(f)))
			continue
		}
		if slices.ContainsFunc(b.families, func(fb *familyBuilder) bool { return fb.family == f }) {
			b.logger.Error(nil, "Ignoring repeated IP family", "family", f)
			continue
		}
		b.svcSkips = append(b.svcSkips, map[string]int{})
		b.families = append(b.families, &familyBuilder{
			family:   f,
			settings: b.settingsFor(cfg.Settings, f),
			services: servicemodel.NewTracker(servicemodel.Config{
				Family:    f,
				ProxyName: cfg.ProxyName,
				Logger:    b.logger,
				OnSkip:    b.serviceSkips(len(b.families)),
			}),
			endpoints: endpoints.NewTracker(endpoints.Config{
				Family:   f,
				NodeName: cfg.NodeName,
				Logger:   b.logger,
				OnSkip:   func(reason string) { b.skip("EndpointSlice", reason) },
			}),
		})
	}
	if b.mode == LocalModeClusterCIDR {
		for _, fb := range b.families {
			if _, ok := detectionCIDR(fb.settings.LocalDetector.CIDRs, fb.family); !ok {
				b.logger.Info("Local traffic detection is ClusterCIDR, but no cluster CIDR of this IP family is set: none of its traffic counts as from a local pod",
					"ipFamily", fb.family, "clusterCIDRs", cfg.Settings.LocalDetector.CIDRs)
			}
		}
	}
	return b
}

func (b *Builder) skip(kind, reason string) {
	if b.onSkip != nil {
		b.onSkip(kind, reason)
	}
}

// serviceSkips adapts family i's service tracker's OnSkip: it tallies the
// reasons of the UpdateService in progress (trackers report synchronously,
// and svcMu is held), which UpdateService then reports merged.
func (b *Builder) serviceSkips(i int) func(string) {
	return func(reason string) {
		switch reason {
		case servicemodel.ReasonOtherProxy, servicemodel.ReasonExternalName, servicemodel.ReasonHeadless,
			servicemodel.ReasonNoClusterIP, servicemodel.ReasonOtherFamily:
			// Not proxied by design, which is not invalid.
			return
		}
		b.svcSkips[i][reason]++
	}
}

// mergeServiceSkips returns the tallied reasons of one update, in a fixed
// order, and clears the tally. An invalid cluster IP belongs to one family;
// every other reason concerns the object whatever the family, so it counts
// as often as the family that saw it most: a bad Service is reported once,
// not once per family, and not lost when one family skipped it whole.
func (b *Builder) mergeServiceSkips() []string {
	if !slices.ContainsFunc(b.svcSkips, func(tally map[string]int) bool { return len(tally) > 0 }) {
		// Nearly every update skips nothing; it need not pay for merging.
		return nil
	}
	merged := map[string]int{}
	for _, tally := range b.svcSkips {
		for reason, n := range tally {
			if reason == servicemodel.ReasonInvalidClusterIP {
				merged[reason] += n
			} else {
				merged[reason] = max(merged[reason], n)
			}
		}
		clear(tally)
	}
	var out []string
	for _, reason := range slices.Sorted(maps.Keys(merged)) {
		for range merged[reason] {
			out = append(out, reason)
		}
	}
	return out
}

// settingsFor returns s with its CIDR lists reduced to family f. Node port
// addresses of no CIDR of f, or with a catch-all CIDR, serve every address,
// as kube-proxy does.
func (b *Builder) settingsFor(s Settings, f v1.IPFamily) Settings {
	s.LocalDetector.CIDRs = b.prefixesOf(s.LocalDetector.CIDRs, f, "localDetector.cidrs")
	s.NodePortAddresses = b.prefixesOf(s.NodePortAddresses, f, "nodePortAddresses")
	if slices.ContainsFunc(s.NodePortAddresses, func(p netip.Prefix) bool { return p.Bits() == 0 }) {
		// Every address serves; adding the primary one would narrow that.
		s.NodePortAddresses, s.NodePortPrimary = nil, false
	}
	return s
}

// withPrimary expands Settings.NodePortPrimary with the family's node IPs.
// A node IP change already makes the next State a full one, so the
// expansion never hides a change from ChangedSince.
func withPrimary(s Settings, ips []netip.Addr) Settings {
	if !s.NodePortPrimary || len(ips) == 0 || ips[0].IsLoopback() {
		return s
	}
	primary := netip.PrefixFrom(ips[0], ips[0].BitLen())
	if !slices.Contains(s.NodePortAddresses, primary) {
		s.NodePortAddresses = append(slices.Clip(s.NodePortAddresses), primary)
	}
	return s
}

func (b *Builder) prefixesOf(list []netip.Prefix, f v1.IPFamily, field string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range list {
		if !p.IsValid() {
			b.logger.Error(nil, "Ignoring invalid CIDR in settings", "field", field, "cidr", p)
			continue
		}
		if familyOf(p.Addr()) == f {
			out = append(out, p.Masked())
		}
	}
	return out
}

// UpdateService records a Service update (old nil: add; new nil: delete) for
// every family. It reports whether a Build is now due.
func (b *Builder) UpdateService(old, new *v1.Service) bool {
	b.svcMu.Lock()
	for _, fb := range b.families {
		fb.services.Update(old, new)
	}
	skipped := b.mergeServiceSkips()
	b.svcMu.Unlock()
	for _, reason := range skipped {
		b.skip("Service", reason)
	}
	return b.due()
}

// UpdateEndpointSlice records an EndpointSlice update for the family of its
// address type. It reports whether a Build is now due. Slices of a family
// the Builder does not build are ignored; FQDN and unknown address types,
// which no proxy can serve, are reported to OnSkip.
func (b *Builder) UpdateEndpointSlice(old, new *discovery.EndpointSlice) bool {
	if new != nil && new.AddressType != discovery.AddressTypeIPv4 && new.AddressType != discovery.AddressTypeIPv6 {
		b.logger.V(2).Info("Ignoring EndpointSlice of an unsupported address type",
			"endpointSlice", logtext.KObj(new), "addressType", logtext.String(string(new.AddressType)))
		b.skip("EndpointSlice", endpoints.SkipAddressType)
	}
	from, to := b.sliceFamily(old), b.sliceFamily(new)
	switch {
	case from == to && to != nil:
		to.endpoints.Update(old, new)
	default:
		// The address type is immutable in the API; should it change
		// anyway, the slice moves between trackers.
		if from != nil {
			from.endpoints.Update(old, nil)
		}
		if to != nil {
			to.endpoints.Update(nil, new)
		}
	}
	return b.due()
}

func (b *Builder) sliceFamily(s *discovery.EndpointSlice) *familyBuilder {
	if s == nil {
		return nil
	}
	var f v1.IPFamily
	switch s.AddressType {
	case discovery.AddressTypeIPv4:
		f = v1.IPv4Protocol
	case discovery.AddressTypeIPv6:
		f = v1.IPv6Protocol
	default:
		return nil
	}
	for _, fb := range b.families {
		if fb.family == f {
			return fb
		}
	}
	return nil
}

// UpdateNode records this node's object. Objects of other nodes are
// ignored, and so is a nil node (a deletion): the proxy keeps serving with
// what it last knew rather than exiting as kube-proxy does. It reports
// whether a Build is now due.
//
// The node supplies its zone (the topology.kubernetes.io/zone label), its
// IPs (InternalIPs, then ExternalIPs, per family) and its pod CIDRs
// (spec.podCIDRs, or spec.podCIDR when that is all there is). Unparsable
// addresses and CIDRs are skipped and reported to OnSkip.
func (b *Builder) UpdateNode(node *v1.Node) bool {
	if node == nil || node.Name != b.nodeName {
		return b.due()
	}
	zone := node.Labels[v1.LabelTopologyZone]
	ips := b.nodeIPs(node)
	cidrs := b.podCIDRs(node)

	b.mu.Lock()
	defer b.mu.Unlock()
	changed, full := false, false
	if zone != b.zone {
		b.zone = zone
		changed, full = true, true
	}
	for _, fb := range b.families {
		fips := filterFamily(ips, fb.family, netip.Addr.Is4)
		if !slices.Equal(fips, fb.ips) {
			fb.ips = fips
			changed, full = true, true
		}
		fcidrs := filterFamily(cidrs, fb.family, func(p netip.Prefix) bool { return p.Addr().Is4() })
		podChanged := !slices.Equal(fcidrs, fb.podCIDRs)
		if podChanged {
			fb.podCIDRs = fcidrs
			// Only NodeCIDR local detection, which every service's rules
			// use, depends on pod CIDRs.
			changed, full = true, full || b.mode == LocalModeNodeCIDR
		}
		if podChanged || !b.nodeSeen {
			b.warnNoPodCIDR(fb)
		}
	}
	b.nodeSeen = true
	b.nodeDirty = b.nodeDirty || changed
	b.nodeFull = b.nodeFull || full
	return b.dueLocked()
}

// warnNoPodCIDR warns, when the node's pod CIDRs of fb's family have just
// changed, that NodeCIDR detection has none of them to work with. Node
// updates come every few seconds; only a change says something new.
func (b *Builder) warnNoPodCIDR(fb *familyBuilder) {
	if b.mode != LocalModeNodeCIDR {
		return
	}
	if _, ok := detectionCIDR(fb.podCIDRs, fb.family); !ok {
		b.logger.Info("Local traffic detection is NodeCIDR, but the node has no pod CIDR of this IP family: none of its traffic counts as from a local pod",
			"ipFamily", fb.family, "node", logtext.String(b.nodeName))
	}
}

func filterFamily[T any](list []T, f v1.IPFamily, is4 func(T) bool) []T {
	var out []T
	for _, x := range list {
		if is4(x) == (f == v1.IPv4Protocol) {
			out = append(out, x)
		}
	}
	return out
}

func (b *Builder) nodeIPs(node *v1.Node) []netip.Addr {
	var ips []netip.Addr
	for _, typ := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type != typ {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || ip.Zone() != "" || ip.IsUnspecified() {
				b.logger.Error(logtext.Error(err), "Ignoring invalid node address", "node", logtext.String(node.Name),
					"type", logtext.String(string(a.Type)), "address", logtext.String(a.Address))
				b.skip("Node", SkipNodeAddress)
				continue
			}
			if ip = ip.Unmap(); !slices.Contains(ips, ip) {
				ips = append(ips, ip)
			}
		}
	}
	return ips
}

func (b *Builder) podCIDRs(node *v1.Node) []netip.Prefix {
	raw := node.Spec.PodCIDRs
	if len(raw) == 0 && node.Spec.PodCIDR != "" {
		raw = []string{node.Spec.PodCIDR}
	}
	var out []netip.Prefix
	for _, s := range raw {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			b.logger.Error(logtext.Error(err), "Ignoring invalid pod CIDR", "node", logtext.String(node.Name), "cidr", logtext.String(s))
			b.skip("Node", SkipPodCIDR)
			continue
		}
		if p = p.Masked(); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// UpdateServiceCIDR records a change of a ServiceCIDR object
// (networking.k8s.io/v1): old is nil for an add and new is nil for a
// delete. The union of every object's CIDRs becomes each State's
// ServiceCIDRs (those of its family); unparsable CIDRs are skipped and
// reported to OnSkip. Service CIDRs change no service's rules, so the next
// State can still tell what changed. It reports whether a Build is now due.
func (b *Builder) UpdateServiceCIDR(old, new *networking.ServiceCIDR) bool {
	var name string
	var cidrs []netip.Prefix
	switch {
	case new != nil:
		name = new.Name
		for _, c := range new.Spec.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				b.skip("ServiceCIDR", SkipServiceCIDR)
				b.logger.Info("Skipping invalid service CIDR", "serviceCIDR", logtext.String(new.Name), "cidr", logtext.String(c))
				continue
			}
			cidrs = append(cidrs, p.Masked())
		}
	case old != nil:
		name = old.Name
	default:
		return b.due()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	prev, had := b.serviceCIDRs[name]
	switch {
	case new == nil && had:
		delete(b.serviceCIDRs, name)
		b.cidrsDirty = true
	case new != nil && (!had || !slices.Equal(prev, cidrs)):
		if b.serviceCIDRs == nil {
			b.serviceCIDRs = map[string][]netip.Prefix{}
		}
		b.serviceCIDRs[name] = cidrs
		b.cidrsDirty = true
	}
	return b.dueLocked()
}

// serviceCIDRsLocked is the sorted union of every object's CIDRs. A CIDR
// two objects share stays while either does.
func (b *Builder) serviceCIDRsLocked() []netip.Prefix {
	var all []netip.Prefix
	for _, cidrs := range b.serviceCIDRs {
		all = append(all, cidrs...)
	}
	slices.SortFunc(all, func(a, c netip.Prefix) int {
		if n := a.Addr().Compare(c.Addr()); n != 0 {
			return n
		}
		return a.Bits() - c.Bits()
	})
	return slices.Compact(all)
}

func (b *Builder) due() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dueLocked()
}

func (b *Builder) dueLocked() bool {
	if b.nodeDirty || b.cidrsDirty {
		return true
	}
	for _, fb := range b.families {
		if fb.services.Pending() > 0 || fb.endpoints.Pending() > 0 {
			return true
		}
	}
	return false
}
