package userspace

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
)

// harness runs an unprivileged Dataplane whose forwarders listen on free
// loopback ports, and asks the forwarders' own routing where a packet
// goes (a loopback client cannot send from the scenarios' addresses).
type harness struct {
	t  testing.TB
	dp *Dataplane
}

func (h *harness) Name() string { return "userspace" }

func (h *harness) Sync(ctx context.Context, s *dataplane.State) error {
	if h.dp == nil {
		// The scenarios' node is Node.IPs: the machine's own addresses
		// must not count.
		d, err := New(Config{Family: s.Family, Listen: loopbackListen, LocalAddresses: &FakeLocalAddresses{}, Logger: logr.Discard()})
		if err != nil {
			return err
		}
		h.dp = d
		h.t.Cleanup(func() { d.Cleanup(context.Background()) })
	}
	return h.dp.Sync(ctx, s)
}

func (h *harness) Cleanup(ctx context.Context) error {
	if h.dp == nil {
		return nil
	}
	return h.dp.Cleanup(ctx)
}

func (h *harness) Trace(_ context.Context, p dataplane.Packet) (dataplane.Verdict, error) {
	if h.dp == nil {
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}
	return h.dp.trace(p)
}

// Mode: the suite expects State.LookupMode(ModeUserspace).
func (h *harness) Mode() dataplane.Mode { return dataplane.ModeUserspace }

// loopbackListen puts every frontend on a free port of 127.0.0.1.
func loopbackListen(Destination) (netip.AddrPort, bool) {
	return netip.MustParseAddrPort("127.0.0.1:0"), true
}

// trace is the verdict d's forwarders give p: the routing a connection
// from p's source to p's destination gets, after checking that a socket
// is listening for it exactly when it must (none without endpoints, so
// that the kernel refuses).
func (d *Dataplane) trace(p dataplane.Packet) (dataplane.Verdict, error) {
	d.routesMu.RLock()
	var dec decision
	if d.routes.dests != nil {
		dec = d.routes.route(p.Dst, p.Protocol, d.routes.clientOf(p.Src, p.From, p.Interface))
	}
	d.routesMu.RUnlock()

	d.mu.Lock()
	f := d.fwds[destKey{p.Dst.Addr(), p.Dst.Port(), p.Protocol}]
	if f == nil {
		f = d.fwds[destKey{port: p.Dst.Port(), proto: p.Protocol}]
	}
	bound, sctp := false, false
	if f != nil {
		_, bound = f.boundAddr()
		sctp = errors.Is(f.bindErr, errSCTP)
	}
	d.mu.Unlock()
	if sctp {
		// No socket and no rule catches an SCTP frontend's packets.
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}

	v := dataplane.Verdict{Action: dec.action}
	if dec.view != nil {
		v.Service = dec.view.sp.Name
	}
	switch dec.action {
	case dataplane.DNAT:
		v.Endpoints = slices.Clone(dec.candidates)
		v.Masquerade = true
		for _, ep := range v.Endpoints {
			if ep.Addr() == p.Src {
				v.Hairpin = append(v.Hairpin, ep)
			}
		}
		v.Affinity = dec.view.sp.SessionAffinity.ClientIP
		fallthrough
	case dataplane.Drop:
		if !bound {
			return v, fmt.Errorf("%s to %s/%s: no forwarder listening", v.Action, p.Dst, p.Protocol)
		}
	}
	return v, nil
}

func TestConformance(t *testing.T) {
	dataplanetest.Run(t, func(t *testing.T) dataplanetest.Harness {
		return &harness{t: t}
	})
}
