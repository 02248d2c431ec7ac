package main

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/dataplane/userspace"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
)

// TestVerifierCountsDrift: one check of a plane whose rules match the
// model counts nothing; after a rule is deleted by hand it counts the
// missing rule.
func TestVerifierCountsDrift(t *testing.T) {
	states := demoStates(t)
	fake := xtables.NewFakeRunner()
	d, err := iptables.New(iptables.Config{Runner: fake})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorded{Dataplane: d}
	if err := rec.Sync(t.Context(), states[0]); err != nil {
		t.Fatal(err)
	}
	pl := plane{Dataplane: rec, last: &rec.last, family: v1.IPv4Protocol}
	o := &options{proxyMode: "iptables", verifyPeriod: time.Hour}
	reg := prometheus.NewRegistry()
	v, err := o.newVerifier(fakeHost(map[v1.IPFamily]*xtables.FakeRunner{v1.IPv4Protocol: fake}), logr.Discard(), reg, []plane{pl})
	if err != nil {
		t.Fatal(err)
	}

	v.check(t.Context(), pl)
	if got := value(t, v.drifts.WithLabelValues("IPv4")); got != 0 {
		t.Errorf("in sync: drifts = %v, want 0", got)
	}
	deleteRule(t, fake, "nat", "PK-SERVICES", "default/web:http cluster IP")
	v.check(t.Context(), pl)
	if got := value(t, v.drifts.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("after a deleted rule: drifts = %v, want 1", got)
	}
	if got := value(t, v.total.WithLabelValues("IPv4", "missing")); got != 1 {
		t.Errorf("after a deleted rule: missing = %v, want 1", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if diff := cmp.Diff([]string{"proxykit_verify_drifts", "proxykit_verify_drifts_total"}, names); diff != "" {
		t.Errorf("registered metrics (-want +got):\n%s", diff)
	}
}

func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Gauge != nil {
		return out.Gauge.GetValue()
	}
	return out.Counter.GetValue()
}

// demoStates is the model of the bundled demo, IPv4 first.
func demoStates(t *testing.T) []*dataplane.State {
	t.Helper()
	objs, err := demoObjects()
	if err != nil {
		t.Fatal(err)
	}
	src := &input{nodeName: demoNodeName}
	src.Source = source.Static(objs)
	states, err := builtStates(t.Context(), src, dataplane.BuilderConfig{NodeName: demoNodeName})
	if err != nil {
		t.Fatal(err)
	}
	return states
}

// TestVerifierUserspace: the periodic check of a userspace plane compares
// its forwarders' listeners with the model: none missing in sync, every
// frontend with endpoints once they are closed behind the recorded State.
func TestVerifierUserspace(t *testing.T) {
	states := demoStates(t)
	d, err := userspace.New(userspace.Config{Logger: logr.Discard(),
		Listen: func(userspace.Destination) (netip.AddrPort, bool) {
			return netip.MustParseAddrPort("127.0.0.1:0"), true
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Cleanup(context.Background()) })
	rec := &recordedUserspace{Dataplane: d}
	if err := rec.Sync(t.Context(), states[0]); err != nil {
		t.Fatal(err)
	}
	pl := plane{Dataplane: rec, last: &rec.last, family: v1.IPv4Protocol}
	o := &options{proxyMode: "userspace", verifyPeriod: time.Hour}
	v, err := o.newVerifier(host{}, logr.Discard(), prometheus.NewRegistry(), []plane{pl})
	if err != nil {
		t.Fatal(err)
	}
	v.check(t.Context(), pl)
	if got := value(t, v.drifts.WithLabelValues("IPv4")); got != 0 {
		t.Errorf("in sync: drifts = %v, want 0", got)
	}
	// Behind the recorder's back: the forwarders close, the model stays.
	empty := dataplane.NewBuilder(dataplane.BuilderConfig{Families: []v1.IPFamily{v1.IPv4Protocol}}).Build().States[0]
	if err := d.Sync(t.Context(), empty); err != nil {
		t.Fatal(err)
	}
	v.check(t.Context(), pl)
	drifts, missing := value(t, v.drifts.WithLabelValues("IPv4")), value(t, v.total.WithLabelValues("IPv4", "missing"))
	if drifts == 0 || missing != drifts {
		t.Errorf("forwarders closed: drifts = %v, missing = %v, want as many missing as drifts, some", drifts, missing)
	}
}
