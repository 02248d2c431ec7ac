package userspace

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// PolicyRoute is what delivers the packets TPROXY marked to the node's own
// sockets: a routing rule sending packets with the mark to Table, and in
// Table one route of type local for the whole family through the loopback
// device (ip rule add fwmark Mark/Mark lookup Table priority Priority; ip
// route add local 0.0.0.0/0 dev lo table Table). Without it a marked
// packet to a service address would be forwarded, not delivered.
type PolicyRoute struct {
	Family   v1.IPFamily
	Mark     uint32
	Table    int
	Priority int
}

// String describes r as ip(8) would add it.
func (r PolicyRoute) String() string {
	all := "0.0.0.0/0"
	if r.Family == v1.IPv6Protocol {
		all = "::/0"
	}
	return fmt.Sprintf("rule fwmark %#x/%#x lookup %d priority %d, route local %s dev lo table %d",
		r.Mark, r.Mark, r.Table, r.Priority, all, r.Table)
}

// PolicyRouting installs, checks and removes a PolicyRoute. NetlinkRouting
// does it in the kernel; FakePolicyRouting records it.
type PolicyRouting interface {
	// Ensure adds what of r is missing.
	Ensure(ctx context.Context, r PolicyRoute) error
	// Missing describes what of r the kernel lacks; nil when nothing.
	Missing(ctx context.Context, r PolicyRoute) ([]string, error)
	// Remove deletes r's rule and route, whether or not they exist.
	Remove(ctx context.Context, r PolicyRoute) error
}

// NetlinkRouting is a PolicyRouting over a rtnetlink socket (the only
// netlink family it opens) of the network namespace it was opened in.
type NetlinkRouting struct {
	h *netlink.Handle
}

// OpenNetlinkRouting opens a NetlinkRouting in the calling thread's network
// namespace.
func OpenNetlinkRouting() (*NetlinkRouting, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink: %w", err)
	}
	return &NetlinkRouting{h: h}, nil
}

// Close closes the netlink socket.
func (n *NetlinkRouting) Close() { n.h.Close() }

func family(f v1.IPFamily) int {
	if f == v1.IPv6Protocol {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func (n *NetlinkRouting) rule(r PolicyRoute) *netlink.Rule {
	rule := netlink.NewRule()
	rule.Family, rule.Table, rule.Priority = family(r.Family), r.Table, r.Priority
	mask := r.Mark
	rule.Mark, rule.Mask = r.Mark, &mask
	return rule
}

func (n *NetlinkRouting) route(r PolicyRoute) (*netlink.Route, error) {
	lo, err := n.h.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("find the loopback device: %w", err)
	}
	all := &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	if r.Family == v1.IPv6Protocol {
		all = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &netlink.Route{Family: family(r.Family), Type: unix.RTN_LOCAL, Dst: all, LinkIndex: lo.Attrs().Index,
		Table: r.Table, Scope: netlink.SCOPE_HOST}, nil
}

// hasRule reports whether the kernel holds r's rule.
func (n *NetlinkRouting) hasRule(r PolicyRoute) (bool, error) {
	rules, err := n.h.RuleList(family(r.Family))
	if err != nil {
		return false, fmt.Errorf("list routing rules: %w", err)
	}
	return slices.ContainsFunc(rules, func(k netlink.Rule) bool {
		return k.Table == r.Table && k.Priority == r.Priority && k.Mark == r.Mark && k.Mask != nil && *k.Mask == r.Mark
	}), nil
}

// hasRoute reports whether r's table holds its local route.
func (n *NetlinkRouting) hasRoute(r PolicyRoute, want *netlink.Route) (bool, error) {
	routes, err := n.h.RouteListFiltered(family(r.Family), &netlink.Route{Table: r.Table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("list the routes of table %d: %w", r.Table, err)
	}
	return slices.ContainsFunc(routes, func(k netlink.Route) bool {
		ones, _ := k.Dst.Mask.Size()
		return k.Type == unix.RTN_LOCAL && k.LinkIndex == want.LinkIndex && ones == 0
	}), nil
}

// Ensure implements PolicyRouting.
func (n *NetlinkRouting) Ensure(_ context.Context, r PolicyRoute) error {
	rt, err := n.route(r)
	if err != nil {
		return err
	}
	if err := n.h.RouteReplace(rt); err != nil {
		return fmt.Errorf("add %s: %w", r, err)
	}
	ok, err := n.hasRule(r)
	if err != nil || ok {
		return err
	}
	if err := n.h.RuleAdd(n.rule(r)); err != nil {
		return fmt.Errorf("add %s: %w", r, err)
	}
	return nil
}

// Missing implements PolicyRouting.
func (n *NetlinkRouting) Missing(_ context.Context, r PolicyRoute) ([]string, error) {
	var out []string
	ok, err := n.hasRule(r)
	if err != nil {
		return nil, err
	}
	if !ok {
		out = append(out, fmt.Sprintf("routing rule fwmark %#x lookup %d", r.Mark, r.Table))
	}
	rt, err := n.route(r)
	if err != nil {
		return nil, err
	}
	if ok, err = n.hasRoute(r, rt); err != nil {
		return nil, err
	}
	if !ok {
		out = append(out, fmt.Sprintf("local route of table %d", r.Table))
	}
	return out, nil
}

// Remove implements PolicyRouting.
func (n *NetlinkRouting) Remove(_ context.Context, r PolicyRoute) error {
	var errs []error
	for {
		ok, err := n.hasRule(r)
		if err != nil || !ok {
			errs = append(errs, err)
			break
		}
		if err := n.h.RuleDel(n.rule(r)); err != nil {
			errs = append(errs, fmt.Errorf("delete the routing rule of %s: %w", r, err))
			break
		}
	}
	if rt, err := n.route(r); err != nil {
		errs = append(errs, err)
	} else if err := n.h.RouteDel(rt); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("delete the local route of %s: %w", r, err))
	}
	return errors.Join(errs...)
}

// FakePolicyRouting is a PolicyRouting in memory, for tests of redirect
// mode over an xtables.FakeRunner.
type FakePolicyRouting struct {
	mu        sync.Mutex
	installed map[PolicyRoute]bool
}

// Installed returns the policy routes in place.
func (f *FakePolicyRouting) Installed() []PolicyRoute {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []PolicyRoute
	for r := range f.installed {
		out = append(out, r)
	}
	return out
}

// Delete removes r as another program would.
func (f *FakePolicyRouting) Delete(r PolicyRoute) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.installed, r)
}

// Ensure implements PolicyRouting.
func (f *FakePolicyRouting) Ensure(_ context.Context, r PolicyRoute) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.installed == nil {
		f.installed = map[PolicyRoute]bool{}
	}
	f.installed[r] = true
	return nil
}

// Missing implements PolicyRouting.
func (f *FakePolicyRouting) Missing(_ context.Context, r PolicyRoute) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.installed[r] {
		return nil, nil
	}
	return []string{"policy route " + r.String()}, nil
}

// Remove implements PolicyRouting.
func (f *FakePolicyRouting) Remove(_ context.Context, r PolicyRoute) error {
	f.Delete(r)
	return nil
}
