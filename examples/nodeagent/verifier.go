package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/troubleshoot"
)

// verifier compares, every --verify-period, what each plane last
// programmed with the kernel (the forwarders' listeners in mode
// userspace; in mode ipvs, what the plane's dataplane reads back), logging and counting what differs. The proxy's own
// reconciling repairs drift of the dataplane's rules; this tells an
// operator that it happened, and finds what reconciling cannot see,
// such as another program's rule that decides first.
type verifier struct {
	o      *options
	h      host
	log    logr.Logger
	planes []plane
	drifts *prometheus.GaugeVec
	total  *prometheus.CounterVec
}

// startVerifier starts the periodic check; stop ends it and waits.
func (o *options) startVerifier(ctx context.Context, h host, log logr.Logger, reg prometheus.Registerer, planes []plane) (stop func(), err error) {
	v, err := o.newVerifier(h, log, reg, planes)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(o.verifyPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, pl := range v.planes {
				v.check(ctx, pl)
			}
		}
	}()
	return func() { cancel(); <-done }, nil
}

// newVerifier returns a verifier of planes whose metrics are registered
// on reg.
func (o *options) newVerifier(h host, log logr.Logger, reg prometheus.Registerer, planes []plane) (*verifier, error) {
	if o.proxyMode != "iptables" && o.proxyMode != "nftables" && o.proxyMode != "ipvs" && o.proxyMode != "userspace" {
		return nil, fmt.Errorf("--verify-period with --proxy-mode %s: %w", o.proxyMode, errNoKernelReading)
	}
	v := &verifier{o: o, h: h, log: log, planes: planes,
		drifts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: proxykit.DefaultMetricsNamespace, Name: "verify_drifts",
			Help: "Differences between the kernel and the model that the last periodic check (--verify-period) found",
		}, []string{"ip_family"}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: proxykit.DefaultMetricsNamespace, Name: "verify_drifts_total",
			Help: "Differences between the kernel and the model that periodic checks (--verify-period) found, by kind",
		}, []string{"ip_family", "kind"}),
	}
	for _, c := range []prometheus.Collector{v.drifts, v.total} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// check compares one plane's last State with the kernel. A sync that
// lands while the kernel is read makes the reading mixed, so that round
// is skipped.
func (v *verifier) check(ctx context.Context, pl plane) {
	st := pl.last.Load()
	if st == nil {
		return
	}
	var found []troubleshoot.Mismatch
	if us, ok := pl.Dataplane.(*recordedUserspace); ok {
		found = troubleshoot.VerifyListeners(st, us)
	} else if rec, ok := pl.Dataplane.(*recordedIPVS); ok {
		// Through the plane's own handles: no new netlink sockets each
		// period, and the reading waits for a sync under way.
		r, err := rec.Read(ctx)
		if err != nil {
			v.log.Error(err, "Cannot read the kernel's IPVS table to verify it", "ipFamily", pl.family)
			return
		}
		found = troubleshoot.Verify(st, dataplane.Mode(v.o.proxyMode), ipvs.NewNamedReading(r, st))
	} else {
		k, err := v.o.kernelOf(ctx, v.h, logr.Discard(), st)
		if err != nil || k == nil {
			v.log.Error(err, "Cannot read the kernel's rules to verify them", "ipFamily", pl.family)
			return
		}
		found = troubleshoot.Verify(st, dataplane.Mode(v.o.proxyMode), k)
	}
	if pl.last.Load() != st {
		return
	}
	family := string(pl.family)
	v.drifts.WithLabelValues(family).Set(float64(len(found)))
	for _, d := range found {
		v.total.WithLabelValues(family, string(d.Kind)).Inc()
		v.log.Info("The kernel differs from the model", "ipFamily", family, "drift", d.String())
	}
}
