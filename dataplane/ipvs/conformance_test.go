package ipvs

import (
	"context"
	"net/netip"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// fakeHarness runs the dataplane against the fakes and traces packets
// through them.
type fakeHarness struct {
	dp     *Dataplane
	ipvs   *ipvstest.FakeIPVS
	nl     *ipvstest.FakeNetlink
	runner *xtables.FakeRunner
	st     *dataplane.State
}

func newFakeHarness() *fakeHarness {
	return &fakeHarness{ipvs: ipvstest.NewFakeIPVS(), nl: ipvstest.NewFakeNetlink(), runner: xtables.NewFakeRunner()}
}

func (h *fakeHarness) Name() string { return "ipvs" }

func (h *fakeHarness) Sync(ctx context.Context, s *dataplane.State) error {
	if h.dp == nil {
		d, err := New(Config{Family: s.Family, Kernel: &ipvstest.Kernel{IPVS: h.ipvs, Netlink: h.nl}, Runner: h.runner})
		if err != nil {
			return err
		}
		h.dp = d
	}
	// The kernel holds the node's addresses, which node ports follow.
	h.nl.SetLinkAddrs("eth0", s.Node.IPs...)
	h.st = s
	return h.dp.Sync(ctx, s)
}

func (h *fakeHarness) Cleanup(ctx context.Context) error {
	if h.dp == nil {
		return nil
	}
	return h.dp.Cleanup(ctx)
}

func (h *fakeHarness) Trace(_ context.Context, p dataplane.Packet) (dataplane.Verdict, error) {
	if h.dp == nil {
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}
	t := &tracer{d: h.dp, ipvs: h.ipvs, nl: h.nl, runner: h.runner, st: h.st}
	return t.trace(p)
}

// Mode: the suite expects State.LookupMode(ModeIPVS).
func (h *fakeHarness) Mode() dataplane.Mode { return dataplane.ModeIPVS }

func TestConformance(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplanetest.Harness { return newFakeHarness() })
}

func (h *fakeHarness) Reconcile(ctx context.Context) (dataplane.Drift, error) {
	return h.dp.Reconcile(ctx)
}

func (h *fakeHarness) KernelChanged(ctx context.Context) (bool, error) {
	if h.dp == nil {
		return false, nil
	}
	return h.dp.KernelChanged(ctx)
}

// Disturb: FlushAll is "ipvsadm -C" plus the link's addresses removed;
// RemoveOne deletes the first virtual server; AddForeign adds a real
// server to the first virtual server that has some.
func (h *fakeHarness) Disturb(_ context.Context, dist dataplanetest.Disturbance) error {
	svcs, err := h.ipvs.GetServices()
	if err != nil {
		return err
	}
	if len(svcs) == 0 {
		return dataplanetest.ErrCannotDisturb
	}
	switch dist {
	case dataplanetest.FlushAll:
		for _, s := range svcs {
			if err := h.ipvs.DelService(s); err != nil {
				return err
			}
		}
		link, err := h.nl.LinkByName(DefaultLink)
		if err != nil {
			return err
		}
		for _, a := range h.nl.LinkAddrs(DefaultLink) {
			if err := h.nl.AddrDel(link, handle.HostAddr(a)); err != nil {
				return err
			}
		}
		return nil
	case dataplanetest.RemoveOne:
		return h.ipvs.DelService(svcs[0])
	case dataplanetest.AddForeign:
		for _, s := range svcs {
			if dests, _ := h.ipvs.GetDestinations(s); len(dests) > 0 {
				foreign := netip.MustParseAddrPort("10.255.0.1:80")
				if s.AddressFamily == 10 {
					foreign = netip.MustParseAddrPort("[fd00:ff::1]:80")
				}
				return h.ipvs.NewDestination(s, new(messages).dest(foreign, 1))
			}
		}
	}
	return dataplanetest.ErrCannotDisturb
}

// readHarness traces packets through what Read finds in the fakes rather
// than through the fakes themselves, so that the shared suite checks
// Read and Reading.Trace as it checks the dataplane.
type readHarness struct{ *fakeHarness }

func (h readHarness) Trace(ctx context.Context, p dataplane.Packet) (dataplane.Verdict, error) {
	if h.dp == nil {
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}
	r, err := h.dp.Read(ctx)
	if err != nil {
		return dataplane.Verdict{}, err
	}
	v, _, err := r.Trace(p, h.st.Node.IPs, memoryNames(h.dp, h.st))
	return v, err
}

// memoryNames names frontends from the dataplane's memory (health-check
// ports from st), as the kernel holds no names.
func memoryNames(d *Dataplane, st *dataplane.State) Namer {
	t := &tracer{d: d, st: st}
	return func(proto v1.Protocol, fe netip.AddrPort) servicemodel.PortName {
		if n := t.portName(vsKey{fe.Addr(), handle.ProtoNumber(string(proto)), fe.Port()}); n.Name != "" {
			return n
		}
		for sp := range st.Services.All() {
			if sp.HealthCheckNodePort == fe.Port() && proto == v1.ProtocolTCP {
				return sp.Name
			}
		}
		return servicemodel.PortName{}
	}
}

func TestConformanceRead(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplanetest.Harness { return readHarness{newFakeHarness()} })
}
