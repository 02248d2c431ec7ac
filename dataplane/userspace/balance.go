package userspace

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/proxykit/proxykit/servicemodel"
)

// portState is what outlives the views of one service port: the balancer's
// position, the ClientIP pins and the open connections.
type portState struct {
	name    servicemodel.PortName
	balance Balance
	max     int
	m       portMetrics

	mu sync.Mutex
	// next is the round-robin position.
	next int
	// pins are the ClientIP affinity pins, by client address.
	pins map[netip.Addr]pin
	// sweepAt is the pin count at which expired pins are swept.
	sweepAt int
	// conns are the open TCP connections and UDP sessions.
	conns map[flow]struct{}
	// gone is set when the service port was removed: no new flow.
	gone bool
	// cur is the view the flows were last retargeted to.
	cur *portView
}

// flow is an open TCP connection or UDP session.
type flow interface {
	endpoint() netip.AddrPort
	// drain closes the flow after d unless it ends first.
	drain(d time.Duration)
	// close ends it now.
	close()
}

type pin struct {
	ep      netip.AddrPort
	expires time.Time
}

func newPortState(name servicemodel.PortName, balance Balance, max int, m portMetrics) *portState {
	return &portState{name: name, balance: balance, max: max, m: m, conns: map[flow]struct{}{}}
}

// pick chooses the endpoint of a new connection from c among candidates
// (sorted, non-empty), honouring and refreshing its ClientIP pin. skip
// holds endpoints already tried for this connection.
func (ps *portState) pick(v *portView, src netip.Addr, candidates []netip.AddrPort, skip []netip.AddrPort, now time.Time) (netip.AddrPort, bool) {
	aff := v.sp.SessionAffinity
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if aff.ClientIP && len(skip) == 0 {
		if p, ok := ps.pins[src]; ok && now.Before(p.expires) {
			if _, found := slices.BinarySearchFunc(candidates, p.ep, netip.AddrPort.Compare); found {
				ps.pins[src] = pin{p.ep, now.Add(aff.Timeout)}
				return p.ep, true
			}
		}
	}
	var ep netip.AddrPort
	found := false
	for range candidates {
		if ps.balance == Random {
			ep = candidates[rand.IntN(len(candidates))]
		} else {
			ep = candidates[ps.next%len(candidates)]
			ps.next++
		}
		if !slices.Contains(skip, ep) {
			found = true
			break
		}
	}
	if !found {
		return netip.AddrPort{}, false
	}
	if aff.ClientIP {
		ps.setPin(src, pin{ep, now.Add(aff.Timeout)}, now)
	}
	return ep, true
}

// unpin forgets src's pin to ep, after ep failed it.
func (ps *portState) unpin(src netip.Addr, ep netip.AddrPort) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.pins[src]; ok && p.ep == ep {
		delete(ps.pins, src)
	}
}

// setPin stores a pin, sweeping expired ones whenever the table has
// doubled since the last sweep, so that it stays proportional to the
// clients seen within one timeout.
func (ps *portState) setPin(src netip.Addr, p pin, now time.Time) {
	if ps.pins == nil {
		ps.pins = map[netip.Addr]pin{}
	}
	ps.pins[src] = p
	if len(ps.pins) < max(ps.sweepAt, 64) {
		return
	}
	for a, q := range ps.pins {
		if !now.Before(q.expires) {
			delete(ps.pins, a)
		}
	}
	ps.sweepAt = 2 * len(ps.pins)
}

// admit registers f unless the port is gone or at its bound.
func (ps *portState) admit(f flow) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.gone || len(ps.conns) >= ps.max {
		return false
	}
	ps.conns[f] = struct{}{}
	ps.m.active.Inc()
	return true
}

// release unregisters f.
func (ps *portState) release(f flow) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, ok := ps.conns[f]; ok {
		delete(ps.conns, f)
		ps.m.active.Dec()
	}
}

// retarget drains the flows to endpoints v no longer sends traffic to, and
// forgets pins to them.
func (ps *portState) retarget(v *portView, drain time.Duration) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.cur = v
	for a, p := range ps.pins {
		if !v.reaches(p.ep) {
			delete(ps.pins, a)
		}
	}
	n := 0
	for f := range ps.conns {
		// A flow without endpoint is dialing, or held as dropped.
		if ep := f.endpoint(); ep.IsValid() && !v.reaches(ep) {
			f.drain(drain)
			n++
		}
	}
	return n
}

// stale reports whether a flow that just reached ep must drain: the port
// was removed or retargeted away from ep while the flow was dialing.
func (ps *portState) stale(ep netip.AddrPort) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.gone || (ps.cur != nil && !ps.cur.reaches(ep))
}

// retire marks the port removed and drains all its flows.
func (ps *portState) retire(drain time.Duration) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.gone = true
	ps.pins = nil
	for f := range ps.conns {
		f.drain(drain)
	}
}

// closeAll ends every flow now.
func (ps *portState) closeAll() {
	ps.mu.Lock()
	flows := make([]flow, 0, len(ps.conns))
	for f := range ps.conns {
		flows = append(flows, f)
	}
	ps.gone = true
	ps.mu.Unlock()
	for _, f := range flows {
		f.close()
	}
}
