package proxykit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
)

// sync is one pass of the loop: build the States, program every dataplane,
// then, for each family whose dataplanes all succeeded, report health,
// feed the health-check node ports and clean conntrack. Anything that
// failed is returned (joined) so that the loop retries with backoff.
func (p *Proxy) sync(ctx context.Context) error {
	start := p.cfg.Clock.Now()
	// Before Build: a change queued later may miss this sync, so it must
	// not count as carried by it. The canary flags are read after, so that
	// drift the watcher reported before this point is repaired by this
	// sync, and drift reported later stays owed.
	p.health.Syncing(p.families...)
	reconcile := map[*plane]bool{}
	forceFull := false
	for _, pl := range p.planes {
		if pl.canaryReported.Load() || pl.mustReconcile || pl.reconcileDue(start, p.cfg.SyncPeriod) {
			reconcile[pl] = true
			_, canRead := pl.Dataplane.(dataplane.Reconciler)
			forceFull = forceFull || pl.programmed && !canRead
		}
	}
	b := p.builder.Build()
	if err := p.absorb(b); err != nil {
		return err
	}
	if forceFull {
		// A dataplane that cannot read back what it programmed is made
		// to program everything instead: a State whose predecessor it
		// never saw makes ChangedSince report !ok, so skip one
		// generation.
		b = p.builder.Build()
		if err := p.absorb(b); err != nil {
			return err
		}
	}
	p.metrics.changesPending.Set(0)

	states := make(map[v1.IPFamily]*dataplane.State, len(p.families))
	for i, f := range p.families {
		states[f] = b.States[i]
	}
	failed := map[v1.IPFamily]bool{}
	var errs []error
	for _, pl := range p.planes {
		first := !pl.programmed
		err := p.syncPlane(ctx, pl, states[pl.Family])
		if err == nil && reconcile[pl] {
			err = p.reconcilePlane(ctx, pl)
		}
		if err != nil {
			failed[pl.Family] = true
			errs = append(errs, err)
			continue
		}
		if first || reconcile[pl] {
			// A first sync programmed everything: the period starts
			// there. A reconcile (or, for a dataplane that cannot read
			// back, a full program) answers the canary.
			pl.lastReconcile = start
			// Repaired before the flag is cleared: a canary that fires
			// in between finds the flag still set and stays silent, and
			// its next poll finds the kernel as it is then.
			p.health.Repaired(pl.Family, pl.Dataplane.Name())
			pl.canaryReported.Store(false)
		}
	}
	for _, f := range p.families {
		if failed[f] {
			continue
		}
		st := states[f]
		p.health.Synced(f)
		p.metrics.servicePorts.WithLabelValues(string(f)).Set(float64(st.Services.Len()))
		p.metrics.serviceEndpoints.WithLabelValues(string(f)).Set(float64(st.Endpoints.Len()))
		p.observeProgramming(f)
		if np := p.nodePorts[f]; np != nil && !p.once {
			serving, failed := np.Sync(p.hcPorts[f], st.Endpoints)
			p.metrics.healthCheckPorts.WithLabelValues(string(f)).Set(float64(serving))
			p.metrics.healthCheckErrors.WithLabelValues(string(f)).Add(float64(failed))
		}
		if err := p.cleanConntrack(ctx, f, st); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// absorb records what one Build reported until it is acted upon: conntrack
// debt and trigger times until the family syncs, health-check node ports as
// the latest known.
func (p *Proxy) absorb(b dataplane.BuildResult) error {
	if len(b.States) != len(p.families) || len(b.Changes) != len(p.families) {
		return fmt.Errorf("builder returned %d states and %d changes for %d families", len(b.States), len(b.Changes), len(p.families))
	}
	for i, f := range p.families {
		c := b.Changes[i]
		if p.cfg.Conntrack != nil {
			p.debt[f].add(c)
			p.metrics.conntrackPending.WithLabelValues(string(f)).Set(float64(p.debt[f].len()))
		}
		for _, times := range c.Endpoints.TriggerTimes {
			for _, t := range times {
				if !t.IsZero() {
					p.triggerTimes[f] = append(p.triggerTimes[f], t)
				}
			}
		}
		p.hcPorts[f] = c.Services.HealthCheckNodePorts
	}
	return nil
}

// reconcileDue reports whether a sync at now owes the plane its periodic
// reconcile.
func (pl *plane) reconcileDue(now time.Time, period time.Duration) bool {
	return !pl.lastReconcile.IsZero() && now.Sub(pl.lastReconcile) >= period
}

// untilReconcile is how long the loop may wait before a plane owes its
// periodic reconcile: never more than period.
func (p *Proxy) untilReconcile() time.Duration {
	wait := p.cfg.SyncPeriod
	now := p.cfg.Clock.Now()
	for _, pl := range p.planes {
		if !pl.lastReconcile.IsZero() {
			wait = min(wait, max(pl.lastReconcile.Add(p.cfg.SyncPeriod).Sub(now), 0))
		}
	}
	return wait
}

// reconcilePlane asks a dataplane that can read back what it programmed to
// repair what someone else changed. A failure fails the family's sync: the
// dataplane no longer knows what the kernel holds, so the retry programs
// everything.
func (p *Proxy) reconcilePlane(ctx context.Context, pl *plane) error {
	r, ok := pl.Dataplane.(dataplane.Reconciler)
	if !ok {
		return nil
	}
	name, fam := pl.Dataplane.Name(), string(pl.Family)
	t0 := p.cfg.Clock.Now()
	drift, err := r.Reconcile(ctx)
	p.metrics.syncDuration.WithLabelValues(fam, name, "reconcile").Observe(p.cfg.Clock.Since(t0).Seconds())
	if err != nil {
		pl.programmed, pl.mustReconcile = false, true
		p.metrics.syncFailures.WithLabelValues(fam, name).Inc()
		// What the kernel holds is unknown until a retry succeeds.
		p.health.Queued(pl.Family)
		return fmt.Errorf("dataplane %s (%s): %w", name, fam, err)
	}
	pl.mustReconcile = false
	if !drift.Empty() {
		p.metrics.driftRepairs.WithLabelValues(fam, name).Add(float64(len(drift.Repaired)))
		p.log.Info("Repaired rules someone else changed", "dataplane", name, "ipFamily", fam,
			"repairs", len(drift.Repaired), "repaired", drift.String())
	}
	return nil
}

// syncPlane programs st into one dataplane and records the outcome. A
// sync that changed something is logged at default verbosity, one line
// per dataplane; one that found nothing to do only at V(2).
func (p *Proxy) syncPlane(ctx context.Context, pl *plane, st *dataplane.State) error {
	full, changed := true, -1
	if pl.programmed {
		if set, ok := st.ChangedFrom(pl.last); ok {
			full, changed = false, set.Len()
		}
	}
	name, fam := pl.Dataplane.Name(), string(pl.Family)
	t0 := p.cfg.Clock.Now()
	err := pl.Dataplane.Sync(ctx, st)
	elapsed := p.cfg.Clock.Since(t0)
	services := changed
	if r, ok := pl.Dataplane.(dataplane.SyncReporter); ok && err == nil {
		// The dataplane knows better: it may have rewritten everything
		// on its own, or found nothing to write.
		rep := r.LastSync()
		full, services = rep.Full, rep.Services
		if !full && rep.Bytes == 0 {
			services = 0
		}
	}
	kind := "partial"
	if full {
		kind = "full"
	}
	p.metrics.syncDuration.WithLabelValues(fam, name, kind).Observe(elapsed.Seconds())
	if err != nil {
		p.metrics.syncFailures.WithLabelValues(fam, name).Inc()
		return fmt.Errorf("dataplane %s (%s): %w", name, fam, err)
	}
	pl.programmed, pl.last = true, st
	p.metrics.lastSync.WithLabelValues(fam, name).Set(float64(p.cfg.Clock.Now().UnixNano()) / 1e9)
	log := p.log.V(2)
	if full || services != 0 {
		log = p.log
	}
	kv := []any{"dataplane", name, "ipFamily", fam, "sync", kind, "servicePorts", st.Services.Len(), "elapsed", elapsed}
	if services >= 0 {
		kv = append(kv, "services", services)
	}
	log.Info("Synced dataplane", kv...)
	return nil
}

// observeProgramming reports network programming latency for the trigger
// times family f has collected since it last synced.
func (p *Proxy) observeProgramming(f v1.IPFamily) {
	now := p.cfg.Clock.Now()
	h := p.metrics.networkProgramming.WithLabelValues(string(f))
	for _, t := range p.triggerTimes[f] {
		h.Observe(max(now.Sub(t), time.Duration(0)).Seconds())
	}
	p.triggerTimes[f] = p.triggerTimes[f][:0]
}

// cleanConntrack hands the cleanup family f owes to the cleaner, now that
// every dataplane of the family programs st. What a failed cleanup owed
// stays owed.
func (p *Proxy) cleanConntrack(ctx context.Context, f v1.IPFamily, st *dataplane.State) error {
	d := p.debt[f]
	if p.cfg.Conntrack == nil || d.len() == 0 {
		return nil
	}
	fam := string(f)
	flows := d.flows(f, st)
	if flows.Empty() {
		d.clear()
		p.metrics.conntrackPending.WithLabelValues(fam).Set(0)
		return nil
	}
	n, err := p.cfg.Conntrack.CleanStale(ctx, flows)
	p.metrics.conntrackDeleted.WithLabelValues(fam).Add(float64(max(n, 0)))
	if err != nil {
		p.metrics.conntrackFailures.WithLabelValues(fam).Inc()
		return fmt.Errorf("conntrack cleanup (%s): %w", fam, err)
	}
	p.log.V(2).Info("Cleaned conntrack", "ipFamily", fam, "frontends", len(flows.Frontends),
		"endpoints", len(flows.Endpoints), "ports", len(flows.Ports), "deleted", n)
	d.clear()
	p.metrics.conntrackPending.WithLabelValues(fam).Set(0)
	return nil
}
