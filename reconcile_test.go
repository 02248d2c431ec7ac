package proxykit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/health"
)

// iptablesHarness runs a Proxy over an iptables Dataplane on a FakeRunner
// with one UDP service of two endpoints programmed.
func iptablesHarness(t *testing.T, cfg Config) (*proxyHarness, *xtables.FakeRunner) {
	t.Helper()
	fake := xtables.NewFakeRunner()
	dp, err := iptables.New(iptables.Config{Runner: fake})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dataplanes = []DataplaneConfig{{Dataplane: dp}}
	h := newProxyHarness(t, cfg).start()
	h.settle()
	h.p.Handler().OnService(nil, udpService("ns", "dns", "172.30.0.10", 53))
	h.p.Handler().OnEndpointSlice(nil, udpSlice("ns", "dns", "10.0.1.1", "10.0.1.2"))
	h.settle()
	return h, fake
}

func tables(fake *xtables.FakeRunner) string {
	rs := fake.Ruleset()
	return string(rs.Save("nat")) + string(rs.Save("filter"))
}

func svcChain(t *testing.T, fake *xtables.FakeRunner) string {
	t.Helper()
	for _, c := range fake.Ruleset().Chains("nat") {
		if strings.HasPrefix(c, "PK-SVC-") {
			return c
		}
	}
	t.Fatal("no service chain")
	return ""
}

// TestProxyRepairsDriftWithinOnePeriod: a chain flushed and a rule
// inserted by someone else are repaired by the next periodic reconcile,
// counted, and the kernel ends as the sync left it; a period without
// drift writes nothing.
func TestProxyRepairsDriftWithinOnePeriod(t *testing.T) {
	h, fake := iptablesHarness(t, Config{CanaryPeriod: -1})
	synced := tables(fake)
	svc := svcChain(t, fake)
	for i, disturb := range []string{
		"*nat\n-F " + svc + "\nCOMMIT\n",
		"*nat\n-I PK-SERVICES 1 -j RETURN\nCOMMIT\n",
	} {
		if err := fake.Restore(t.Context(), xtables.RestoreBytes(disturb)); err != nil {
			t.Fatal(err)
		}
		h.clock.Step(DefaultSyncPeriod)
		h.settle()
		if diff := cmp.Diff(synced, tables(fake)); diff != "" {
			t.Errorf("disturbance %d not repaired after one period (-synced +now):\n%s", i, diff)
		}
		if got := metricValue(h.p.metrics.driftRepairs.WithLabelValues("IPv4", "iptables")); got != float64(i+1) {
			t.Errorf("drift repairs after disturbance %d = %v, want %d", i, got, i+1)
		}
	}
	restores := len(fake.Restores())
	h.clock.Step(DefaultSyncPeriod)
	h.settle()
	if n := len(fake.Restores()) - restores; n != 0 {
		t.Errorf("a period without drift ran %d restores", n)
	}
}

// TestProxyCanaryTriggersReconcile: "iptables -F" by another program is
// noticed by the canary within CanaryPeriod and repaired without waiting
// for the sync period.
func TestProxyCanaryTriggersReconcile(t *testing.T) {
	h, fake := iptablesHarness(t, Config{})
	synced := tables(fake)
	if err := fake.Restore(t.Context(), xtables.RestoreBytes("*nat\n-F\nCOMMIT\n*filter\n-F\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(DefaultCanaryPeriod)
	waitFor(t, "the canary", func() bool {
		return metricValue(h.p.metrics.kernelChanges.WithLabelValues("IPv4", "iptables")) == 1
	})
	h.settle()
	if diff := cmp.Diff(synced, tables(fake)); diff != "" {
		t.Errorf("flush not repaired after the canary fired (-synced +now):\n%s", diff)
	}
	if !h.p.Health().Healthy {
		t.Error("unhealthy after the repair")
	}
}

// canaryPlane is a Recorder that is a Reconciler and a KernelWatcher whose
// answers the test sets.
type canaryPlane struct {
	*dataplanetest.Recorder
	changed      atomic.Bool
	mu           sync.Mutex
	reconcileErr error
	reconciles   int
}

func (c *canaryPlane) Reconcile(context.Context) (dataplane.Drift, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconciles++
	if c.reconcileErr != nil {
		return dataplane.Drift{}, c.reconcileErr
	}
	if c.changed.Swap(false) {
		return dataplane.Drift{Repaired: []string{"everything"}}, nil
	}
	return dataplane.Drift{}, nil
}

func (c *canaryPlane) KernelChanged(context.Context) (bool, error) { return c.changed.Load(), nil }

// TestProxyUnrepairedDriftIsUnhealthy: drift the canary found and that
// cannot be repaired counts as a change not synced: /healthz turns
// unhealthy after HealthTimeout, and healthy again once a repair works.
func TestProxyUnrepairedDriftIsUnhealthy(t *testing.T) {
	plane := &canaryPlane{Recorder: dataplanetest.NewRecorder("canary")}
	h := newProxyHarness(t, Config{
		Dataplanes:    []DataplaneConfig{{Dataplane: plane}},
		SyncPeriod:    time.Hour,
		HealthTimeout: time.Minute,
		Logger:        logr.Discard(),
	}).start()
	h.settle()
	plane.mu.Lock()
	plane.reconcileErr = errors.New("iptables-save: lock held")
	plane.mu.Unlock()
	plane.changed.Store(true)
	for range 30 {
		h.clock.Step(5 * time.Second)
		h.settle()
	}
	if h.p.Health().Healthy {
		t.Error("healthy after 150s of unrepaired drift (timeout 1m)")
	}
	if n := metricValue(h.p.metrics.kernelChanges.WithLabelValues("IPv4", "canary")); n != 1 {
		t.Errorf("the canary reported one disturbance %v times while its repair failed", n)
	}
	plane.mu.Lock()
	plane.reconcileErr = nil
	plane.mu.Unlock()
	h.clock.Step(5 * time.Minute) // past the retry backoff
	h.settle()
	if !h.p.Health().Healthy {
		t.Error("unhealthy after the drift was repaired")
	}
}

// TestProxyHealthzFailsWhileDrifted: drift the canary found fails /healthz
// at once, the body naming the family and dataplane, while the repair
// fails, and /healthz answers 200 again once a reconcile repaired it; each
// disturbance is counted once.
func TestProxyHealthzFailsWhileDrifted(t *testing.T) {
	plane := &canaryPlane{Recorder: dataplanetest.NewRecorder("canary")}
	h := newProxyHarness(t, Config{
		Dataplanes:    []DataplaneConfig{{Dataplane: plane}},
		SyncPeriod:    time.Hour,
		HealthTimeout: time.Hour,
		Logger:        logr.Discard(),
	}).start()
	h.settle()
	healthz := func() (int, health.Report) {
		t.Helper()
		w := httptest.NewRecorder()
		h.p.HealthzHandler().ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
		var r health.Report
		if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
			t.Fatalf("/healthz body %q: %v", w.Body.String(), err)
		}
		return w.Code, r
	}
	if code, _ := healthz(); code != 200 {
		t.Fatalf("/healthz before any drift: %d", code)
	}
	for i := range 2 {
		plane.mu.Lock()
		plane.reconcileErr = errors.New("iptables-save: lock held")
		plane.mu.Unlock()
		plane.changed.Store(true)
		h.clock.Step(DefaultCanaryPeriod)
		waitFor(t, "the canary", func() bool {
			return metricValue(h.p.metrics.kernelChanges.WithLabelValues("IPv4", "canary")) == float64(i+1)
		})
		h.settle()
		code, r := healthz()
		var got []string
		for _, d := range r.Drift {
			got = append(got, string(d.IPFamily)+" "+d.Dataplane)
		}
		if code != 503 || !cmp.Equal(got, []string{"IPv4 canary"}) {
			t.Errorf("disturbance %d, repair failing: /healthz %d drift %q, want 503 naming IPv4 canary", i+1, code, got)
		}
		plane.mu.Lock()
		plane.reconcileErr = nil
		plane.mu.Unlock()
		h.clock.Step(time.Hour) // past the retry backoff
		h.settle()
		if code, r := healthz(); code != 200 || len(r.Drift) > 0 {
			t.Errorf("disturbance %d repaired: /healthz %d drift %v, want 200 and none", i+1, code, r.Drift)
		}
	}
	if n := metricValue(h.p.metrics.kernelChanges.WithLabelValues("IPv4", "canary")); n != 2 {
		t.Errorf("two disturbances counted %v times", n)
	}
}

// TestProxyReconcileDueDespiteChanges: a change synced shortly before the
// period ends does not postpone the periodic reconcile by a whole period.
func TestProxyReconcileDueDespiteChanges(t *testing.T) {
	h, fake := iptablesHarness(t, Config{CanaryPeriod: -1})
	h.clock.Step(DefaultSyncPeriod - 5*time.Second)
	h.p.Handler().OnEndpointSlice(udpSlice("ns", "dns", "10.0.1.1", "10.0.1.2"), udpSlice("ns", "dns", "10.0.1.1"))
	h.settle()
	synced := tables(fake)
	if err := fake.Restore(t.Context(), xtables.RestoreBytes("*nat\n-F "+svcChain(t, fake)+"\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(5 * time.Second)
	h.settle()
	if diff := cmp.Diff(synced, tables(fake)); diff != "" {
		t.Errorf("not repaired one period after the last reconcile (-synced +now):\n%s", diff)
	}
}

// TestProxyFailingPeriodicReconcileIsUnhealthy: a periodic Reconcile that
// keeps failing, with no change queued and no canary, turns /healthz
// unhealthy after HealthTimeout: what the kernel holds is unknown.
func TestProxyFailingPeriodicReconcileIsUnhealthy(t *testing.T) {
	plane := &canaryPlane{Recorder: dataplanetest.NewRecorder("canary")}
	plane.reconcileErr = errors.New("iptables-save: lock held")
	h := newProxyHarness(t, Config{
		Dataplanes:    []DataplaneConfig{{Dataplane: plane}},
		SyncPeriod:    time.Minute,
		HealthTimeout: time.Minute,
		CanaryPeriod:  -1,
		Logger:        logr.Discard(),
	}).start()
	h.settle()
	for range 10 {
		h.clock.Step(time.Minute)
		h.settle()
	}
	if h.p.Health().Healthy {
		t.Error("healthy while every periodic Reconcile fails")
	}
}
