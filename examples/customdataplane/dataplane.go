package customdataplane

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"sync"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Dataplane programs States into a Table and serves it over HTTP. It is
// safe for concurrent use.
type Dataplane struct {
	mu    sync.RWMutex
	table Table
	// prev is the State of the last successful Sync: what the table holds,
	// and where to find the keys a changed service had.
	prev *dataplane.State
	last dataplane.SyncReport
}

var (
	_ dataplane.Dataplane    = (*Dataplane)(nil)
	_ dataplane.SyncReporter = (*Dataplane)(nil)
)

// New returns a Dataplane with an empty table.
func New() *Dataplane {
	d := &Dataplane{}
	d.reset()
	return d
}

func (d *Dataplane) reset() {
	d.table = Table{Frontends: map[string][]Entry{}, NodePorts: map[string][]Entry{}, HealthChecks: map[uint16][]servicemodel.PortName{}}
	d.prev = nil
}

// Name implements dataplane.Dataplane.
func (d *Dataplane) Name() string { return "customdataplane" }

// Sync implements dataplane.Dataplane: it rewrites the entries of the
// services that changed since the State it last programmed, or of every
// service when s cannot tell.
func (d *Dataplane) Sync(ctx context.Context, s *dataplane.State) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	var changed []types.NamespacedName
	if set, ok := s.ChangedFrom(d.prev); ok {
		changed = set.UnsortedList()
	} else {
		d.reset()
		for nn := range s.Services.Services() {
			changed = append(changed, nn)
		}
	}
	t := &d.table
	t.Family, t.Generation, t.NodeIPs, t.NodePortAddrs = s.Family, s.Generation, s.Node.IPs, nodePortAddrs(s)
	t.Pods = Detector{}
	switch m := s.Settings.LocalDetector; m.Mode {
	case dataplane.LocalModeClusterCIDR, dataplane.LocalModeNodeCIDR:
		t.Pods.CIDR, _ = s.DetectionCIDR()
	case dataplane.LocalModeBridgeInterface, dataplane.LocalModeInterfaceNamePrefix:
		t.Pods = Detector{Interface: m.Interface, Prefix: m.Mode == dataplane.LocalModeInterfaceNamePrefix}
	}
	for _, nn := range changed {
		d.rewrite(s, nn)
	}
	d.last = dataplane.SyncReport{Full: d.prev == nil, Services: len(changed)}
	d.prev = s
	return nil
}

// rewrite removes the entries service nn had in the previous State and
// writes those of its ports in s.
func (d *Dataplane) rewrite(s *dataplane.State, nn types.NamespacedName) {
	t := &d.table
	mine := func(n servicemodel.PortName) bool { return n.NamespacedName == nn }
	if d.prev != nil {
		for _, sp := range d.prev.Services.Service(nn) {
			for _, k := range frontendKeys(sp) {
				prune(t.Frontends, k, func(e Entry) bool { return mine(e.Service) })
			}
			prune(t.NodePorts, NodePortKey(sp.NodePort, sp.Protocol), func(e Entry) bool { return mine(e.Service) })
			prune(t.HealthChecks, sp.HealthCheckNodePort, mine)
		}
	}
	for _, sp := range s.Services.Service(nn) {
		in, ext := entries(s, sp, t.Pods)
		for i, k := range frontendKeys(sp) {
			e := ext
			switch {
			case i == 0:
				e = in // the cluster IP
			case i > len(sp.ExternalIPs):
				e.Allowed = allowed(s, sp) // a load-balancer VIP
			}
			t.Frontends[k] = insert(t.Frontends[k], e)
		}
		if sp.NodePort != 0 {
			k := NodePortKey(sp.NodePort, sp.Protocol)
			t.NodePorts[k] = insert(t.NodePorts[k], ext)
		}
		if hc := sp.HealthCheckNodePort; hc != 0 {
			t.HealthChecks[hc] = append(t.HealthChecks[hc], sp.Name)
			slices.SortFunc(t.HealthChecks[hc], servicemodel.PortName.Compare)
		}
	}
}

// frontendKeys is the port's cluster IP, external IPs and VIPs, as keys
// of Table.Frontends.
func frontendKeys(sp *servicemodel.ServicePort) []string {
	var keys []string
	for _, ip := range append(append([]netip.Addr{sp.ClusterIP}, sp.ExternalIPs...), sp.LoadBalancerVIPs...) {
		keys = append(keys, FrontendKey(netip.AddrPortFrom(ip, sp.Port), sp.Protocol))
	}
	return keys
}

// entries decides, with State.Select, what each class of client gets at
// the port's cluster IP (in) and at its external destinations (ext).
func entries(s *dataplane.State, sp *servicemodel.ServicePort, pods Detector) (in, ext Entry) {
	sel, pol := s.Select(sp), sp.Policy()
	in = Entry{Service: sp.Name, Affinity: sp.SessionAffinity.ClientIP}
	ext = in

	internal := sel.Cluster
	if pol.InternalLocal {
		internal = sel.Local
	}
	hasInternal := !pol.InternalLocal || len(sel.Local) > 0
	masq := s.Settings.MasqueradeAll
	in.FromPod = dnat(internal, masq, sel.HasAny, hasInternal)
	// Traffic not from a local pod may come from off-cluster through this
	// node: masqueraded when a detector can tell.
	detects := pods.CIDR.IsValid() || pods.Interface != ""
	in.FromNode = dnat(internal, masq || detects, sel.HasAny, hasInternal)
	in.Other = in.FromNode

	if !pol.ExternalLocal {
		ext.FromPod = dnat(sel.Cluster, true, sel.HasAny, true)
		ext.FromNode, ext.Other = ext.FromPod, ext.FromPod
		return in, ext
	}
	// externalTrafficPolicy Local: pods and the node still reach every
	// endpoint, even when none is local; only outside clients keep their
	// source and stay local, dropped when there is none.
	ext.FromPod = dnat(sel.Cluster, false, sel.HasAny, true)
	ext.FromNode = dnat(sel.Cluster, true, sel.HasAny, true)
	ext.Other = dnat(sel.Local, false, sel.HasAny, len(sel.Local) > 0)
	return in, ext
}

// dnat is the action sending traffic to eps, or, with none, rejecting it
// when the port has no endpoint at all (hasAny), dropping it when its
// traffic policy leaves none (hasPolicy), and passing it otherwise.
func dnat(eps []*endpoints.Endpoint, masq, hasAny, hasPolicy bool) Action {
	switch {
	case !hasAny:
		return Action{Verb: Reject}
	case !hasPolicy:
		return Action{Verb: Drop}
	case len(eps) == 0:
		return Action{Verb: Pass}
	}
	a := Action{Verb: DNAT, Masquerade: masq}
	for _, e := range eps {
		a.Backends = append(a.Backends, e.Addr)
	}
	slices.SortFunc(a.Backends, netip.AddrPort.Compare)
	return a
}

// allowed is the sources the port's VIPs accept; empty when all are. A
// node reaching a VIP it holds sends from the VIP, so the VIPs are allowed
// when the ranges admit one of the node's IPs.
func allowed(s *dataplane.State, sp *servicemodel.ServicePort) []netip.Prefix {
	list := slices.Clone(sp.LoadBalancerSourceRanges)
	if len(list) > 0 && slices.ContainsFunc(s.Node.IPs, func(ip netip.Addr) bool { return contains(list, ip) }) {
		for _, vip := range sp.LoadBalancerVIPs {
			list = append(list, netip.PrefixFrom(vip, vip.BitLen()))
		}
	}
	return list
}

// nodePortAddrs is the destinations that serve node ports: the node IPs
// Settings.NodePortAddresses selects (all when it selects none or holds a
// /0), and IPv4 loopback with LocalhostNodePorts.
func nodePortAddrs(s *dataplane.State) []netip.Prefix {
	cidrs := s.Settings.NodePortAddresses
	all := len(cidrs) == 0 || slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Bits() == 0 })
	var out []netip.Prefix
	for _, ip := range s.Node.IPs {
		if all || contains(cidrs, ip) {
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	if lo := netip.MustParseAddr("127.0.0.1"); s.Settings.LocalhostNodePorts && s.Family != v1.IPv6Protocol {
		if all {
			out = append(out, netip.MustParsePrefix("127.0.0.0/8"))
		} else if contains(cidrs, lo) {
			out = append(out, netip.PrefixFrom(lo, 32))
		}
	}
	return out
}

func contains(list []netip.Prefix, ip netip.Addr) bool {
	return slices.ContainsFunc(list, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// prune removes from m[k] the elements mine matches, and k when none are
// left.
func prune[K comparable, E any](m map[K][]E, k K, mine func(E) bool) {
	if list := slices.DeleteFunc(m[k], mine); len(list) > 0 {
		m[k] = list
	} else {
		delete(m, k)
	}
}

// insert adds e to list, keeping it sorted by service port name.
func insert(list []Entry, e Entry) []Entry {
	i, _ := slices.BinarySearchFunc(list, e, func(a, b Entry) int { return a.Service.Compare(b.Service) })
	return slices.Insert(list, i, e)
}

// Cleanup implements dataplane.Dataplane: the table is emptied.
func (d *Dataplane) Cleanup(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reset()
	return nil
}

// LastSync implements dataplane.SyncReporter.
func (d *Dataplane) LastSync() dataplane.SyncReport {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.last
}

// ServeHTTP serves the table as JSON, as a datapath's loader fetches it.
func (d *Dataplane) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&d.table); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
