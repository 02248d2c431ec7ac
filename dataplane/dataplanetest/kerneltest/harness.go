package kerneltest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// ErrUnreproducible is wrapped by the errors Trace returns for a packet the
// lab cannot send as described: a source it would have to spoof, an
// interface it has no link for, a protocol it cannot speak.
var ErrUnreproducible = errors.New("kerneltest: packet cannot be reproduced")

// Config configures a Harness.
type Config struct {
	// New creates the dataplane under test for the first State's family.
	// It runs on a thread inside the node namespace, so the netlink
	// sockets it opens belong to that namespace; Sync and Cleanup run
	// there too.
	New func(family v1.IPFamily) (dataplane.Dataplane, error)
	// ForgetAffinity makes the programmed dataplane forget which endpoint
	// each client is pinned to (for iptables, clearing its xt_recent
	// lists). It runs inside the node namespace. Without it a service with
	// ClientIP affinity shows only the one endpoint a client is pinned to,
	// so the affinity scenarios fail.
	ForgetAffinity func() error
	// Disturb, if set, changes what the dataplane programmed as another
	// program would (dataplanetest.Drifter); it runs inside the node
	// namespace. Return dataplanetest.ErrCannotDisturb for a disturbance
	// it cannot make. Without it the suite's reconcile checks are skipped.
	Disturb func(d dataplanetest.Disturbance) error
	// Proxy says the dataplane is a proxy that connects to endpoints
	// itself (the userspace dataplane): it completes a TCP handshake
	// before it decides, so a connection it accepts and never answers
	// counts as a Drop and one it resets as a Reject, and every
	// connection reaches its endpoint from the proxy's address, so every
	// DNAT is masqueraded.
	Proxy bool
	// PodNetwork is the shape of the lab's pod network; the zero value is
	// PodNetworkRouted, Calico's. Filter the scenarios with its
	// Reproducible.
	PodNetwork PodNetwork
}

// Harness is a dataplanetest.Harness over a dataplane programmed into a
// real kernel. Make one per scenario with New; it builds its lab at the
// first Sync, from that State's family and local-traffic detector.
type Harness struct {
	t   testing.TB
	cfg Config
	dp  dataplane.Dataplane
	lab *lab
}

// New returns a Harness whose namespaces and listeners are removed when t
// ends.
func New(t testing.TB, cfg Config) *Harness {
	return &Harness{t: t, cfg: cfg}
}

// Name is the dataplane's name, prefixed with "kernel:".
func (h *Harness) Name() string {
	if h.dp == nil {
		return "kernel"
	}
	return "kernel:" + h.dp.Name()
}

// Sync builds the lab at the first call, places every endpoint of s in a
// namespace that answers on its port, and Syncs the dataplane inside the
// node namespace.
func (h *Harness) Sync(ctx context.Context, s *dataplane.State) error {
	if err := h.start(s); err != nil {
		return err
	}
	for _, se := range s.Endpoints.Services() {
		for _, eps := range se.Ports {
			for _, ep := range eps {
				if err := h.lab.serveEndpoint(ep.Addr); err != nil {
					return err
				}
			}
		}
	}
	return h.lab.node.ns.Do(func() error { return h.dp.Sync(ctx, s) })
}

// program Syncs s without serving its endpoints, for a State whose
// endpoints the lab need not, or cannot, hold (a fuzz corpus's).
func (h *Harness) program(ctx context.Context, s *dataplane.State) error {
	if err := h.start(s); err != nil {
		return err
	}
	return h.lab.node.ns.Do(func() error { return h.dp.Sync(ctx, s) })
}

// start builds the lab and the dataplane at the first State and places
// the node addresses of s.
func (h *Harness) start(s *dataplane.State) error {
	if h.lab == nil {
		l, err := newLab(h.t, s.Family, s.Settings.LocalDetector, h.cfg.PodNetwork)
		if err != nil {
			return err
		}
		h.lab = l
		if err := l.node.ns.Do(func() (err error) {
			h.dp, err = h.cfg.New(s.Family)
			return err
		}); err != nil {
			return fmt.Errorf("create the dataplane in the node namespace: %w", err)
		}
	} else if s.Family != h.lab.family {
		return fmt.Errorf("kerneltest: a %s State for a lab built for %s", s.Family, h.lab.family)
	}
	return h.lab.setNodeIPs(s.Node.IPs)
}

// Cleanup runs the dataplane's Cleanup inside the node namespace.
func (h *Harness) Cleanup(ctx context.Context) error {
	if h.dp == nil {
		return nil
	}
	return h.lab.node.ns.Do(func() error { return h.dp.Cleanup(ctx) })
}

// nftablesLeft is what the node namespace's nftables ruleset holds; ""
// also when nft is not on PATH (logged on t). The lab itself writes no
// rules, so anything there is the dataplane's.
func (h *Harness) nftablesLeft(t testing.TB) string {
	if h.lab == nil {
		return ""
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Logf("not reading what Cleanup left in nftables: %v", err)
		return ""
	}
	out, err := h.lab.node.ns.Run("nft", "list", "ruleset")
	if err != nil {
		return fmt.Sprintf("(nft list ruleset: %v: %s)", err, out)
	}
	return out
}

// Disturb runs Config.Disturb inside the node namespace; without one it
// returns dataplanetest.ErrCannotDisturb.
func (h *Harness) Disturb(_ context.Context, d dataplanetest.Disturbance) error {
	if h.cfg.Disturb == nil || h.lab == nil {
		return dataplanetest.ErrCannotDisturb
	}
	return h.lab.node.ns.Do(func() error { return h.cfg.Disturb(d) })
}

// Reconcile runs the dataplane's Reconcile inside the node namespace, or
// returns dataplanetest.ErrNotImplemented.
func (h *Harness) Reconcile(ctx context.Context) (drift dataplane.Drift, err error) {
	r, ok := h.dp.(dataplane.Reconciler)
	if !ok {
		return drift, dataplanetest.ErrNotImplemented
	}
	err = h.lab.node.ns.Do(func() (err error) {
		drift, err = r.Reconcile(ctx)
		return err
	})
	return drift, err
}

// KernelChanged runs the dataplane's KernelChanged inside the node
// namespace, or returns dataplanetest.ErrNotImplemented.
func (h *Harness) KernelChanged(ctx context.Context) (changed bool, err error) {
	w, ok := h.dp.(dataplane.KernelWatcher)
	if !ok {
		return false, dataplanetest.ErrNotImplemented
	}
	err = h.lab.node.ns.Do(func() (err error) {
		changed, err = w.KernelChanged(ctx)
		return err
	})
	return changed, err
}

// Observable returns v without what a connection cannot show: Service and
// Reason, and Affinity when there are fewer than two endpoints to be pinned
// to one of. It makes Harness a dataplanetest.Partial.
func (h *Harness) Observable(v dataplane.Verdict) dataplane.Verdict {
	v.Service, v.Reason = servicemodel.PortName{}, ""
	if len(v.Endpoints) < 2 {
		v.Affinity = false
	}
	if h.cfg.Proxy && v.Action == dataplane.DNAT {
		v.Masquerade = true
	}
	return v
}

// Reproducible reports whether a Harness can send case c of scenario s
// in some pod network: it is dataplanetest.TagKernelSafe and TCP or UDP.
// A test filters with its PodNetwork's Reproducible, which also checks
// the interface c enters through.
func Reproducible(s dataplanetest.Scenario, c dataplanetest.PacketCase) bool {
	return dataplanetest.HasTag(dataplanetest.TagKernelSafe)(s, c) && network(c.Packet.Protocol) != ""
}

// Bounds of the sampling that finds a DNAT verdict's endpoint set: it stops
// after quietTries connections in a row reached no new endpoint (with three
// equally likely endpoints the chance of missing one is below 1e-5), and
// after maxTries in all.
const (
	quietTries = 32
	maxTries   = 256
)

// Trace sends p for real and reads its verdict from where the connections
// went; see the package documentation. Before the first Sync there is no
// lab to send from, which is an error.
func (h *Harness) Trace(ctx context.Context, p dataplane.Packet) (dataplane.Verdict, error) {
	if h.lab == nil {
		return dataplane.Verdict{}, errors.New("kerneltest: Trace before the first Sync")
	}
	from, err := h.lab.sender(p)
	if err != nil {
		return dataplane.Verdict{}, err
	}
	nw := network(p.Protocol)
	if nw == "" {
		return dataplane.Verdict{}, fmt.Errorf("%w: protocol %s", ErrUnreproducible, p.Protocol)
	}
	if err := h.lab.serveDestination(p.Dst, nw); err != nil {
		return dataplane.Verdict{}, err
	}
	probe := func() (answer, error) {
		if err := ctx.Err(); err != nil {
			return answer{}, err
		}
		return connect(from.ns, nw, p.Src, p.Dst, h.cfg.Proxy, h.lab.ports)
	}

	first, err := probe()
	switch {
	case err != nil:
		return dataplane.Verdict{}, err
	case first.outcome == refused:
		return dataplane.Verdict{Action: dataplane.Reject}, nil
	case first.outcome == silent:
		return dataplane.Verdict{Action: dataplane.Drop}, nil
	case first.reached == p.Dst:
		if first.client != p.Src {
			return dataplane.Verdict{}, fmt.Errorf("kerneltest: %s reached untranslated but from %s, not %s", p.Dst, first.client, p.Src)
		}
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}

	reached := map[netip.AddrPort]bool{}
	masqueraded := true
	record := func(a answer) (isNew bool, err error) {
		if a.outcome != answered || a.reached == p.Dst {
			return false, fmt.Errorf("kerneltest: %s was DNATed to %s, then %s", p.Dst, first.reached, a)
		}
		masqueraded = masqueraded && a.client != p.Src
		isNew = !reached[a.reached]
		reached[a.reached] = true
		return isNew, nil
	}
	sample := func(forget bool) error {
		for quiet, tries := 0, 0; quiet < quietTries && tries < maxTries; tries++ {
			if forget {
				if err := h.lab.node.ns.Do(h.cfg.ForgetAffinity); err != nil {
					return fmt.Errorf("kerneltest: ForgetAffinity: %w", err)
				}
			}
			a, err := probe()
			if err != nil {
				return err
			}
			isNew, err := record(a)
			if err != nil {
				return err
			}
			if isNew {
				quiet = 0
			} else {
				quiet++
			}
		}
		return nil
	}
	if _, err := record(first); err != nil {
		return dataplane.Verdict{}, err
	}
	if err := sample(false); err != nil {
		return dataplane.Verdict{}, err
	}
	pinned := false
	if len(reached) == 1 && h.cfg.ForgetAffinity != nil {
		if err := sample(true); err != nil {
			return dataplane.Verdict{}, err
		}
		pinned = len(reached) > 1
	}

	v := dataplane.Verdict{Action: dataplane.DNAT, Masquerade: masqueraded, Affinity: pinned}
	for ep := range reached {
		v.Endpoints = append(v.Endpoints, ep)
	}
	slices.SortFunc(v.Endpoints, netip.AddrPort.Compare)
	for _, ep := range v.Endpoints {
		if ep.Addr() == p.Src {
			v.Hairpin = append(v.Hairpin, ep)
		}
	}
	v.Reason = fmt.Sprintf("%d connections from %s", len(reached), from.ns.Name)
	return v, nil
}

func network(p v1.Protocol) string {
	switch p {
	case v1.ProtocolTCP:
		return "tcp"
	case v1.ProtocolUDP:
		return "udp"
	}
	return ""
}
