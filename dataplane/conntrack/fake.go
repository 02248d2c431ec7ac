package conntrack

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// FakeTable is an in-memory conntrack table that implements Netlink, for
// tests of code that uses a Cleaner. It holds flows of both families and
// applies filters to those of the requested family, as the kernel does. Its
// methods may be called from any goroutine.
type FakeTable struct {
	mu    sync.Mutex
	flows []*netlink.ConntrackFlow
	errs  []error
	dumps int
}

// NewFakeTable returns a table holding flows.
func NewFakeTable(flows ...*netlink.ConntrackFlow) *FakeTable {
	return &FakeTable{flows: slices.Clone(flows)}
}

// Add adds flows to the table.
func (t *FakeTable) Add(flows ...*netlink.ConntrackFlow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flows = append(t.flows, flows...)
}

// Flows returns the flows left in the table, in the order they were added.
func (t *FakeTable) Flows() []*netlink.ConntrackFlow {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.flows)
}

// Dumps returns how many times the table was dumped.
func (t *FakeTable) Dumps() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dumps
}

// FailNext makes the next len(errs) dumps fail, one error each, in order.
// An error that is netlink.ErrDumpInterrupted (or unix.EINTR) behaves as an
// interrupted dump does: only the first half of the table is seen, and the
// error is returned with what was deleted. Any other error fails the dump
// before anything is deleted.
func (t *FakeTable) FailNext(errs ...error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs = append(t.errs, errs...)
}

// ConntrackDeleteFilters implements Netlink.
func (t *FakeTable) ConntrackDeleteFilters(_ netlink.ConntrackTableType, family netlink.InetFamily, filters ...netlink.CustomConntrackFilter) (uint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dumps++
	var err error
	if len(t.errs) > 0 {
		err, t.errs = t.errs[0], t.errs[1:]
	}
	seen := len(t.flows)
	switch {
	case err == nil:
	case errors.Is(err, unix.EINTR):
		seen /= 2
	default:
		return 0, err
	}
	var deleted uint
	kept := t.flows[:0:0]
	for i, flow := range t.flows {
		if i < seen && flow.FamilyType == uint8(family) && slices.ContainsFunc(filters, func(f netlink.CustomConntrackFilter) bool {
			return f.MatchConntrackFlow(flow)
		}) {
			deleted++
			continue
		}
		kept = append(kept, flow)
	}
	t.flows = kept
	return deleted, err
}

// NewFlow returns the conntrack entry a DNAT from frontend to endpoint
// creates for a packet from client: replies come from endpoint back to
// client. Pass endpoint == frontend for a flow that was not DNATed. A
// protocol other than TCP, UDP and SCTP gives protocol number 0.
func NewFlow(protocol v1.Protocol, client, frontend, endpoint netip.AddrPort) *netlink.ConntrackFlow {
	proto, ok := protoNumber(protocol)
	if !ok && protocol == v1.ProtocolTCP {
		proto = unix.IPPROTO_TCP
	}
	family := uint8(unix.AF_INET)
	if !client.Addr().Unmap().Is4() {
		family = unix.AF_INET6
	}
	ip := func(a netip.AddrPort) net.IP { return net.IP(a.Addr().Unmap().AsSlice()) }
	return &netlink.ConntrackFlow{
		FamilyType: family,
		Forward: netlink.IPTuple{
			Protocol: proto,
			SrcIP:    ip(client), SrcPort: client.Port(),
			DstIP: ip(frontend), DstPort: frontend.Port(),
		},
		Reverse: netlink.IPTuple{
			Protocol: proto,
			SrcIP:    ip(endpoint), SrcPort: endpoint.Port(),
			DstIP: ip(client), DstPort: client.Port(),
		},
	}
}

// ConntrackTableList implements Lister: the flows of family, in the order
// they were added.
func (t *FakeTable) ConntrackTableList(_ netlink.ConntrackTableType, family netlink.InetFamily) ([]*netlink.ConntrackFlow, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*netlink.ConntrackFlow
	for _, f := range t.flows {
		if netlink.InetFamily(f.FamilyType) == family {
			out = append(out, f)
		}
	}
	return out, nil
}
