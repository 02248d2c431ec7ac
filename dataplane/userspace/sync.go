package userspace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// portEntry is a service port the Dataplane serves.
type portEntry struct {
	view  *portView
	state *portState
}

// Sync makes the forwarders serve s. Only the services State.ChangedSince
// names are looked at (all when it cannot tell, or the node or settings
// changed), and of those only ports whose ServicePort or endpoint list
// changed get a new routing view: sockets stay open across endpoint
// changes, and nothing of another service is touched. Frontends that
// cannot listen are returned in a *BindError after everything else was
// applied, and retried.
func (d *Dataplane) Sync(ctx context.Context, s *dataplane.State) error {
	if err := backend.CheckState("userspace", d.cfg.Family, s); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.life == nil {
		d.life, d.kill = context.WithCancel(context.Background())
		d.routes.dests = map[destKey][]claim{}
		d.routes.local = d.localAddresses()
		d.svcs = map[types.NamespacedName][]servicemodel.PortName{}
	}
	full := !d.synced || !reflect.DeepEqual(d.node, s.Node) || !reflect.DeepEqual(d.settings, s.Settings)
	changed, ok := s.ChangedFrom(d.last)
	if full {
		ok = false
	}
	var names []types.NamespacedName
	if ok {
		names = changed.UnsortedList()
	} else {
		for nn := range s.Services.Services() {
			names = append(names, nn)
		}
		for nn := range d.svcs {
			if len(s.Services.Service(nn)) == 0 {
				names = append(names, nn)
			}
		}
	}

	w := syncWork{touched: map[destKey]bool{}}
	d.routesMu.Lock()
	if full {
		d.routes.node, d.routes.set = s.Node, s.Settings
		d.routes.detect, d.routes.hasDetect = s.DetectionCIDR()
		d.node, d.settings = s.Node, s.Settings
		d.watchInterfaces(s.Settings.LocalDetector.Mode)
	}
	for _, nn := range names {
		d.syncService(s, nn, full, &w)
	}
	d.routesMu.Unlock()

	for _, e := range w.retarget {
		if n := e.state.retarget(e.view, d.cfg.DrainTimeout); n > 0 {
			d.log.V(2).Info("Draining connections to removed endpoints", "service", e.state.name, "connections", n)
		}
	}
	for _, ps := range w.retired {
		ps.retire(d.cfg.DrainTimeout)
		d.metrics.forget(ps.name)
	}
	for k := range w.touched {
		d.placeForwarder(k)
	}
	bindErr, rebound := d.retryBinds(d.life)
	// A touched forwarder that wants a socket is bound by retryBinds:
	// once in keys, or its old rules would be deleted twice.
	keys := append(slices.Collect(maps.Keys(w.touched)), slices.DeleteFunc(rebound, func(k destKey) bool { return w.touched[k] })...)
	n, err := d.redirectSync(ctx, keys, !ok)
	if err != nil {
		// The next Sync looks at everything again.
		d.synced = false
		return errors.Join(err, bindErr.orNil())
	}

	d.last, d.synced = s, true
	d.report = dataplane.SyncReport{Full: !ok, Services: w.written, Bytes: n}
	d.log.V(2).Info("Synced", "full", !ok, "servicePorts", w.written, "forwarders", len(d.fwds))
	return bindErr.orNil()
}

// syncWork is what syncService leaves for after the routes are updated.
type syncWork struct {
	touched  map[destKey]bool
	retarget []portEntry
	retired  []*portState
	written  int
}

// syncService brings the routes of one service in line with s; with
// routesMu held.
func (d *Dataplane) syncService(s *dataplane.State, nn types.NamespacedName, full bool, w *syncWork) {
	ports := s.Services.Service(nn)
	var names []servicemodel.PortName
	for _, sp := range ports {
		if reason := d.invalid(sp); reason != "" {
			d.log.V(2).Info("Skipping a service port", "service", sp.Name, "reason", reason)
			if d.cfg.OnSkip != nil {
				d.cfg.OnSkip(sp.Name.String() + ": " + reason)
			}
			continue
		}
		names = append(names, sp.Name)
		e, known := d.ports[sp.Name]
		eps := s.Endpoints.Get(sp.Name)
		if known && !full && e.view.sp == sp && slices.Equal(e.view.eps, eps) {
			continue
		}
		if !known {
			e.state = newPortState(sp.Name, d.cfg.Balance, d.cfg.MaxConnections, d.metrics.port(sp.Name))
		} else {
			d.unclaim(e.view, w.touched)
		}
		e.view = newPortView(s, sp, e.state)
		d.claim(e.view, w.touched)
		d.ports[sp.Name] = e
		w.retarget = append(w.retarget, e)
		w.written++
	}
	for _, old := range d.svcs[nn] {
		if slices.Contains(names, old) {
			continue
		}
		e := d.ports[old]
		d.unclaim(e.view, w.touched)
		delete(d.ports, old)
		w.retired = append(w.retired, e.state)
		w.written++
	}
	if len(names) == 0 {
		delete(d.svcs, nn)
	} else {
		d.svcs[nn] = names
	}
}

// watchInterfaces starts or stops finding the interface of connections,
// as the interface-based detectors need it; with mu held. The netlink
// socket is made in the Sync's network namespace.
func (d *Dataplane) watchInterfaces(mode dataplane.LocalMode) {
	need := mode == dataplane.LocalModeBridgeInterface || mode == dataplane.LocalModeInterfaceNamePrefix
	if need && d.finder == nil {
		f, err := newIfaceFinder()
		if err != nil {
			d.log.Error(err, "Cannot find the interface of connections: none counts as local pod traffic", "detectLocalMode", mode)
			return
		}
		d.finder = f
	}
	if need {
		d.ifaces.Store(d.finder)
	} else {
		d.ifaces.Store(nil)
	}
}

// invalid says why a port cannot be served, "" when it can.
func (d *Dataplane) invalid(sp *servicemodel.ServicePort) string {
	want := d.cfg.Family == v1.IPv6Protocol
	switch {
	case !sp.ClusterIP.IsValid() || sp.ClusterIP.Unmap().Is6() != want:
		return fmt.Sprintf("cluster IP %s is not %s", sp.ClusterIP, d.cfg.Family)
	case sp.Port == 0:
		return "port 0"
	}
	return ""
}

// destsOf lists v's destinations with the kind of each.
func (d *Dataplane) destsOf(v *portView) map[destKey]FrontendKind {
	sp := v.sp
	want := d.cfg.Family == v1.IPv6Protocol
	out := map[destKey]FrontendKind{}
	add := func(ip netip.Addr, port uint16, k FrontendKind) {
		key := destKey{ip, port, sp.Protocol}
		if _, dup := out[key]; !dup {
			out[key] = k
		}
	}
	add(sp.ClusterIP, sp.Port, ClusterIP)
	for _, ip := range sp.ExternalIPs {
		if ip.IsValid() && ip.Is6() == want {
			add(ip, sp.Port, ExternalIP)
		}
	}
	for _, ip := range sp.LoadBalancerVIPs {
		if ip.IsValid() && ip.Is6() == want {
			add(ip, sp.Port, LoadBalancerIP)
		}
	}
	if sp.NodePort != 0 {
		add(netip.Addr{}, sp.NodePort, NodePort)
	}
	return out
}

// claim adds v's claims to the routes; with routesMu held.
func (d *Dataplane) claim(v *portView, touched map[destKey]bool) {
	for k, kind := range d.destsOf(v) {
		list := append(slices.Clip(d.routes.dests[k]), claim{v, kind})
		slices.SortFunc(list, compareClaims)
		d.routes.dests[k] = list
		touched[k] = true
	}
}

// unclaim removes v's claims from the routes; with routesMu held.
func (d *Dataplane) unclaim(v *portView, touched map[destKey]bool) {
	for k := range d.destsOf(v) {
		list := slices.DeleteFunc(slices.Clone(d.routes.dests[k]), func(c claim) bool { return c.view == v })
		if len(list) == 0 {
			delete(d.routes.dests, k)
		} else {
			d.routes.dests[k] = list
		}
		touched[k] = true
	}
}

// placeForwarder makes the forwarder of k match its claims: created for
// the first, told whether to listen, removed with the last.
func (d *Dataplane) placeForwarder(k destKey) {
	claims := d.routes.dests[k]
	f := d.fwds[k]
	if len(claims) == 0 {
		if f != nil {
			d.unbind(f)
			delete(d.fwds, k)
		}
		return
	}
	if f == nil {
		fe := Destination{Kind: claims[0].kind, Protocol: k.proto, Addr: netip.AddrPortFrom(k.addr, k.port)}
		if k.nodePort() {
			fe.Addr = netip.AddrPortFrom(d.unspecified(), k.port)
		}
		f = &forwarder{key: k, fe: fe}
		f.listen, f.served = d.listenAddr(fe)
		// Listening on every address, a node port forwarder sees where a
		// connection went; in redirect mode the rules have already
		// chosen the addresses.
		f.localDst = k.nodePort() && d.redir == nil && f.listen.Addr().IsUnspecified()
		d.fwds[k] = f
	}
	f.want = slices.ContainsFunc(claims, func(c claim) bool { return c.view.hasEndpoints })
	if _, bound := f.boundAddr(); f.want && !bound && f.served {
		d.unbound[k] = f
	} else {
		d.reconcile(d.life, f)
	}
}

func (d *Dataplane) unspecified() netip.Addr {
	if d.cfg.Family == v1.IPv6Protocol {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

// listenAddr is where fe's forwarder listens. In redirect mode it is a
// free port where the rules deliver and nowhere else: for a service
// address, loopback, where REDIRECT sends the node's own packets (the
// traffic entering the node goes to the ingress socket on the service
// address itself); for a node port, every address, as a DNAT of the port
// alone keeps the address the packet reached, and the rules refuse what
// reaches that port without it (see RedirectConfig).
func (d *Dataplane) listenAddr(fe Destination) (netip.AddrPort, bool) {
	switch {
	case d.redir != nil && fe.Addr.Addr().IsUnspecified():
		return netip.AddrPortFrom(d.unspecified(), 0), true
	case d.redir != nil && d.cfg.Family == v1.IPv6Protocol:
		return netip.AddrPortFrom(netip.IPv6Loopback(), 0), true
	case d.redir != nil:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0), true
	case d.cfg.Listen != nil:
		return d.cfg.Listen(fe)
	}
	return fe.Addr, true
}

// Cleanup closes every forwarder and connection at once and waits for all
// their goroutines to end. The Dataplane can be synced again afterwards.
func (d *Dataplane) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.retry != nil {
		d.retry.Stop()
		d.retry = nil
	}
	for _, f := range d.fwds {
		d.unbind(f)
	}
	var err error
	if d.redir != nil {
		err = d.redir.cleanup(ctx)
	}
	for _, e := range d.ports {
		e.state.closeAll()
		d.metrics.forget(e.state.name)
	}
	d.routesMu.Lock()
	d.routes = routes{}
	d.routesMu.Unlock()
	if d.kill != nil {
		d.kill()
	}
	d.wg.Wait()
	d.ifaces.Store(nil)
	if d.finder != nil {
		d.finder.close()
		d.finder = nil
	}
	d.fwds = map[destKey]*forwarder{}
	d.ports = map[servicemodel.PortName]portEntry{}
	d.unbound = map[destKey]*forwarder{}
	d.svcs = nil
	d.life, d.kill = nil, nil
	d.synced = false
	d.metrics.unbound.Set(0)
	return err
}
