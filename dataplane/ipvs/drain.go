package ipvs

import (
	"errors"
	"net/netip"
	"slices"

	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"
)

// Graceful termination: the real servers at weight 0 waiting for their
// connections to end, which every Sync and Reconcile looks at first.

type drainKey struct {
	vs   vsKey
	dest netip.AddrPort
}

// startDrain records that the real server of dk is at weight 0 from now
// on; its line in the kernel's table joins the fingerprint.
func (d *Dataplane) startDrain(dk drainKey) {
	if _, ok := d.draining[dk]; ok {
		return
	}
	d.draining[dk] = d.cfg.Clock.Now().Add(d.cfg.DrainTimeout)
	s := rsSum(dk.vs, dk.dest, masq, 0)
	ds := d.drainSums[dk.vs]
	d.drainSums[dk.vs] = drainSum{ds.n + 1, ds.sum + s}
	d.expect += s
}

// drainSum is the count and the fingerprint of one virtual server's
// draining real servers.
type drainSum struct {
	n   int
	sum uint64
}

// undrain forgets a draining real server: deleted, gone, or wanted again.
func (d *Dataplane) undrain(dk drainKey) {
	if _, ok := d.draining[dk]; !ok {
		return
	}
	delete(d.draining, dk)
	s := rsSum(dk.vs, dk.dest, masq, 0)
	d.expect -= s
	if ds := d.drainSums[dk.vs]; ds.n > 1 {
		d.drainSums[dk.vs] = drainSum{ds.n - 1, ds.sum - s}
	} else {
		delete(d.drainSums, dk.vs)
	}
}

// forgetDrains forgets the draining real servers of k, deleted with it.
func (d *Dataplane) forgetDrains(k vsKey) {
	if _, ok := d.drainSums[k]; !ok {
		return
	}
	for dk := range d.draining {
		if dk.vs == k {
			d.undrain(dk)
		}
	}
}

// drain deletes the draining real servers whose connections are gone or
// whose time is up: one dump per virtual server with draining real
// servers, never a wait. Errors are logged; the next call retries.
func (d *Dataplane) drain() {
	if len(d.draining) == 0 {
		return
	}
	byVS := map[vsKey][]netip.AddrPort{}
	for k := range d.draining {
		byVS[k.vs] = append(byVS[k.vs], k.dest)
	}
	now := d.cfg.Clock.Now()
	for k, dests := range byVS {
		svc := d.service(k, 0, 0)
		have, err := d.ipvs.GetDestinations(svc)
		if err != nil {
			// The virtual server is gone, and its real servers with it.
			d.forgetDrains(k)
			continue
		}
		for _, ap := range dests {
			dk := drainKey{k, ap}
			i := slices.IndexFunc(have, func(h *mobyipvs.Destination) bool { return destAddr(h) == ap })
			if i < 0 {
				d.undrain(dk)
				continue
			}
			if have[i].ActiveConnections > 0 && now.Before(d.draining[dk]) {
				continue
			}
			if err := d.ipvs.DelDestination(svc, have[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				d.log.Error(err, "Deleting a drained real server", "virtualServer", k.String(), "realServer", ap)
				continue
			}
			d.undrain(dk)
		}
	}
}

// Draining returns the real servers at weight 0 waiting for their
// connections to end, as "TCP 10.96.0.1:80 -> 10.1.0.1:8080", sorted.
func (d *Dataplane) Draining() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for k := range d.draining {
		out = append(out, k.vs.String()+" -> "+k.dest.String())
	}
	slices.Sort(out)
	return out
}
