package proxykit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func serve(t *testing.T, h http.Handler) (int, Health, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	var body Health
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	return w.Code, body, w.Header()
}

// TestHealthStaleness follows upstream's TestHealthzServer: a change queued
// for HealthTimeout or longer without a sync makes the family unhealthy,
// and a sync heals it.
func TestHealthStaleness(t *testing.T) {
	const timeout = 10 * time.Second
	clock := clocktesting.NewFakeClock(t0)
	m, _ := newMetrics("proxykit", nil)
	h := newProxyHealth(clock, timeout, "", m)
	v4, v6 := v1.IPv4Protocol, v1.IPv6Protocol
	healthz, livez := healthzHandler{h}, livezHandler{h}

	type step struct {
		name  string
		do    func()
		code  int
		state map[v1.IPFamily]bool
	}
	steps := []step{
		{"before start", func() {}, 200, map[v1.IPFamily]bool{}},
		{"started", func() { h.start([]v1.IPFamily{v4, v6}) }, 200, map[v1.IPFamily]bool{v4: true, v6: true}},
		{"initial sync late", func() { clock.Step(timeout) }, 503, map[v1.IPFamily]bool{v4: false, v6: false}},
		{"v4 synced", func() { h.updated(v4) }, 503, map[v1.IPFamily]bool{v4: true, v6: false}},
		{"v6 synced", func() { h.updated(v6) }, 200, map[v1.IPFamily]bool{v4: true, v6: true}},
		{"queued", func() { h.queued([]v1.IPFamily{v4, v6}) }, 200, map[v1.IPFamily]bool{v4: true, v6: true}},
		{"queued again, not late", func() { clock.Step(timeout / 2); h.queued([]v1.IPFamily{v4}) }, 200, map[v1.IPFamily]bool{v4: true, v6: true}},
		{"oldest change late", func() { clock.Step(timeout / 2) }, 503, map[v1.IPFamily]bool{v4: false, v6: false}},
		{"only v6 synced", func() { h.updated(v6) }, 503, map[v1.IPFamily]bool{v4: false, v6: true}},
		{"v4 synced too", func() { h.updated(v4) }, 200, map[v1.IPFamily]bool{v4: true, v6: true}},
		{"long idle", func() { clock.Step(25 * time.Second) }, 200, map[v1.IPFamily]bool{v4: true, v6: true}},
	}
	for _, s := range steps {
		s.do()
		for _, hd := range []http.Handler{healthz, livez} {
			code, body, hdr := serve(t, hd)
			if code != s.code || body.Healthy != (s.code == 200) {
				t.Errorf("%s: %T = %d healthy=%v, want %d", s.name, hd, code, body.Healthy, s.code)
			}
			got := map[v1.IPFamily]bool{}
			for f, fh := range body.Status {
				got[f] = fh.Healthy
			}
			if diff := cmp.Diff(s.state, got); diff != "" {
				t.Errorf("%s: per-family health (-want +got):\n%s", s.name, diff)
			}
			if !body.CurrentTime.Equal(clock.Now()) {
				t.Errorf("%s: currentTime %v, want %v", s.name, body.CurrentTime, clock.Now())
			}
			if code == 200 && !body.LastUpdated.Equal(clock.Now()) {
				t.Errorf("%s: healthy lastUpdated %v, want now", s.name, body.LastUpdated)
			}
			if hdr.Get("Content-Type") != "application/json" || hdr.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s: headers %v", s.name, hdr)
			}
		}
	}
	if got := metricValue(m.healthz.WithLabelValues("200")); got != 7 {
		t.Errorf("healthz 200 count = %v, want 7", got)
	}
	if got := metricValue(m.livez.WithLabelValues("503")); got != 4 {
		t.Errorf("livez 503 count = %v, want 4", got)
	}
}

// TestHealthNodeEligibility: /healthz, not /livez, fails on a node that is
// gone, being deleted, or tainted for deletion by the autoscaler.
func TestHealthNodeEligibility(t *testing.T) {
	clock := clocktesting.NewFakeClock(t0)
	m, _ := newMetrics("proxykit", nil)
	now := metav1.NewTime(t0)
	for _, tc := range []struct {
		name     string
		node     *v1.Node
		eligible bool
	}{
		{"no node", nil, false},
		{"node", dataplanetest.TestNode(nil), true},
		{"being deleted", dataplanetest.TestNode(func(n *v1.Node) { n.DeletionTimestamp = &now }), false},
		{"autoscaler taint", dataplanetest.TestNode(func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: ToBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}
		}), false},
		{"other taint", dataplanetest.TestNode(func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "example.com/other", Effect: v1.TaintEffectNoSchedule}}
		}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newProxyHealth(clock, time.Minute, dataplanetest.NodeName, m)
			h.start([]v1.IPFamily{v1.IPv4Protocol})
			h.setNode(tc.node)
			code, body, _ := serve(t, healthzHandler{h})
			wantCode := map[bool]int{true: 200, false: 503}[tc.eligible]
			if code != wantCode || body.NodeEligible == nil || *body.NodeEligible != tc.eligible {
				t.Errorf("/healthz = %d nodeEligible=%v, want %d %v", code, body.NodeEligible, wantCode, tc.eligible)
			}
			code, body, _ = serve(t, livezHandler{h})
			if code != 200 || body.NodeEligible != nil {
				t.Errorf("/livez = %d nodeEligible=%v, want 200 and no field", code, body.NodeEligible)
			}
		})
	}
}

// TestProxyHealthzGoesStale runs a proxy whose dataplane keeps failing:
// the change it cannot program turns /healthz unhealthy after
// HealthTimeout, and the next successful sync heals it.
func TestProxyHealthzGoesStale(t *testing.T) {
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{
		Dataplanes:     []DataplaneConfig{{Dataplane: rec}},
		SyncPeriod:     30 * time.Second,
		RetryPeriod:    2 * time.Minute,
		MaxRetryPeriod: 2 * time.Minute,
	}).start()
	h.settle()
	rec.FailNext(1, nil)
	h.p.Handler().OnService(nil, udpService("ns", "a", "172.30.0.10", 53))
	h.awaitSleep(2 * time.Minute)
	h.clock.Step(59 * time.Second)
	if code, _, _ := serve(t, h.p.HealthzHandler()); code != 200 {
		t.Errorf("/healthz = %d before the timeout", code)
	}
	h.clock.Step(time.Second)
	code, body, _ := serve(t, h.p.LivezHandler())
	if code != 503 || body.Status[v1.IPv4Protocol].Healthy {
		t.Errorf("/livez = %d %+v after the timeout, want 503", code, body)
	}
	if h.p.Health().Healthy {
		t.Error("Health() healthy after the timeout")
	}
	h.clock.Step(time.Minute)
	h.settle()
	if code, _, _ := serve(t, h.p.LivezHandler()); code != 200 {
		t.Errorf("/livez = %d after a successful sync", code)
	}
}
