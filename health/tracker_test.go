package health

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

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func serve(t *testing.T, h http.Handler) (int, Report, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	var body Report
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
	h := NewTracker(clock, timeout, "")
	v4, v6 := v1.IPv4Protocol, v1.IPv6Protocol
	healthz, livez := h.Healthz(), h.Livez()

	type step struct {
		name  string
		do    func()
		code  int
		state map[v1.IPFamily]bool
	}
	all := map[v1.IPFamily]bool{v4: true, v6: true}
	steps := []step{
		{"before start", func() {}, 200, map[v1.IPFamily]bool{}},
		{"started", func() { h.Start(v4, v6) }, 200, all},
		{"initial sync late", func() { clock.Step(timeout) }, 503, map[v1.IPFamily]bool{v4: false, v6: false}},
		{"v4 synced", func() { h.Syncing(v4, v6); h.Synced(v4) }, 503, map[v1.IPFamily]bool{v4: true, v6: false}},
		{"v6 synced", func() { h.Synced(v6) }, 200, all},
		{"queued", func() { h.Queued(v4, v6) }, 200, all},
		{"queued again, not late", func() { clock.Step(timeout / 2); h.Queued(v4) }, 200, all},
		{"oldest change late", func() { clock.Step(timeout / 2) }, 503, map[v1.IPFamily]bool{v4: false, v6: false}},
		{"only v6 synced", func() { h.Syncing(v4, v6); h.Synced(v6) }, 503, map[v1.IPFamily]bool{v4: false, v6: true}},
		{"v4 synced too", func() { h.Synced(v4) }, 200, all},
		{"long idle", func() { clock.Step(25 * time.Second) }, 200, all},

		// kube-proxy's rule for a failed sync: what it carried stays owed.
		{"sync fails", func() { h.Queued(v4); h.Syncing(v4, v6) }, 200, all},
		{"failed change late", func() { clock.Step(timeout) }, 503, map[v1.IPFamily]bool{v4: false, v6: true}},
		{"retry fails too", func() { h.Syncing(v4, v6) }, 503, map[v1.IPFamily]bool{v4: false, v6: true}},
		{"retry succeeds", func() { h.Syncing(v4, v6); h.Synced(v4) }, 200, all},

		// A change queued while a sync runs is not carried by it: that
		// sync's success does not clear it.
		{"change, sync begins", func() { h.Queued(v4); h.Syncing(v4, v6) }, 200, all},
		{"change during the sync", func() { clock.Step(timeout / 2); h.Queued(v4) }, 200, all},
		{"sync succeeds", func() { h.Synced(v4) }, 200, all},
		{"next syncs fail", func() { h.Syncing(v4, v6); clock.Step(timeout) }, 503, map[v1.IPFamily]bool{v4: false, v6: true}},
		{"next sync succeeds", func() { h.Syncing(v4, v6); h.Synced(v4) }, 200, all},

		// Drift found and not repaired counts as a queued change (for
		// /livez: TestHealthDrift follows /healthz).
		{"drift", func() { h.Drifted(v6, "x") }, 200, all},
		{"drift not repaired", func() { clock.Step(timeout) }, 503, map[v1.IPFamily]bool{v4: true, v6: false}},
		{"drift repaired", func() { h.Syncing(v4, v6); h.Repaired(v6, "x"); h.Synced(v6) }, 200, all},
	}
	for _, s := range steps {
		s.do()
		for _, hd := range []http.Handler{healthz, livez} {
			if s.name == "drift" && hd == healthz {
				continue
			}
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
}

// TestHealthNodeEligibility: /healthz, not /livez, fails on a node that is
// gone, being deleted, or tainted for deletion by the autoscaler.
func TestHealthNodeEligibility(t *testing.T) {
	clock := clocktesting.NewFakeClock(t0)
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
			h := NewTracker(clock, time.Minute, dataplanetest.NodeName)
			h.Start(v1.IPv4Protocol)
			h.SetNode(tc.node)
			code, body, _ := serve(t, h.Healthz())
			wantCode := map[bool]int{true: 200, false: 503}[tc.eligible]
			if code != wantCode || body.NodeEligible == nil || *body.NodeEligible != tc.eligible {
				t.Errorf("/healthz = %d nodeEligible=%v, want %d %v", code, body.NodeEligible, wantCode, tc.eligible)
			}
			code, body, _ = serve(t, h.Livez())
			if code != 200 || body.NodeEligible != nil {
				t.Errorf("/livez = %d nodeEligible=%v, want 200 and no field", code, body.NodeEligible)
			}
		})
	}
}

// TestHealthDrift: drift a dataplane's canary found fails /healthz at once,
// naming the family and dataplane, until that dataplane repaired it;
// /livez, and the family's staleness, follow the timeout rule.
func TestHealthDrift(t *testing.T) {
	const timeout = 10 * time.Second
	clock := clocktesting.NewFakeClock(t0)
	h := NewTracker(clock, timeout, "")
	v4, v6 := v1.IPv4Protocol, v1.IPv6Protocol
	h.Start(v4, v6)
	h.Syncing(v4, v6)
	h.Synced(v4)
	h.Synced(v6)
	t1 := t0.Add(time.Second)
	for _, s := range []struct {
		name          string
		do            func()
		healthz, livz int
		drift         []Drift
	}{
		{"healthy", func() {}, 200, 200, nil},
		{"v6 drifted", func() { clock.SetTime(t1); h.Drifted(v6, "nftables") }, 503, 200,
			[]Drift{{IPFamily: v6, Dataplane: "nftables", Since: t1}}},
		{"reported again, first time kept", func() { clock.Step(time.Second); h.Drifted(v6, "nftables") }, 503, 200,
			[]Drift{{IPFamily: v6, Dataplane: "nftables", Since: t1}}},
		{"v4 too", func() { h.Drifted(v4, "nftables") }, 503, 200,
			[]Drift{{IPFamily: v4, Dataplane: "nftables", Since: t1.Add(time.Second)}, {IPFamily: v6, Dataplane: "nftables", Since: t1}}},
		{"another dataplane's repair", func() { h.Repaired(v4, "iptables") }, 503, 200,
			[]Drift{{IPFamily: v4, Dataplane: "nftables", Since: t1.Add(time.Second)}, {IPFamily: v6, Dataplane: "nftables", Since: t1}}},
		{"v4 repaired", func() { h.Syncing(v4, v6); h.Repaired(v4, "nftables"); h.Synced(v4) }, 503, 200,
			[]Drift{{IPFamily: v6, Dataplane: "nftables", Since: t1}}},
		{"v6 repaired", func() { h.Repaired(v6, "nftables"); h.Synced(v6) }, 200, 200, nil},
		{"unrepaired past the timeout", func() { h.Drifted(v4, "iptables"); clock.Step(timeout) }, 503, 503,
			[]Drift{{IPFamily: v4, Dataplane: "iptables", Since: t1.Add(time.Second)}}},
	} {
		s.do()
		for _, c := range []struct {
			name string
			h    http.Handler
			want int
		}{{"/healthz", h.Healthz(), s.healthz}, {"/livez", h.Livez(), s.livz}} {
			code, body, _ := serve(t, c.h)
			if code != c.want {
				t.Errorf("%s: %s = %d, want %d", s.name, c.name, code, c.want)
			}
			if diff := cmp.Diff(s.drift, body.Drift); diff != "" {
				t.Errorf("%s: %s drift (-want +got):\n%s", s.name, c.name, diff)
			}
		}
		if got := h.Serving(); got != (s.healthz == 200) {
			t.Errorf("%s: Serving = %v, want %v", s.name, got, s.healthz == 200)
		}
	}
}
