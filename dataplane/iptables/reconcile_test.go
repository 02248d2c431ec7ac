package iptables

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// oneServiceState is one ClusterIP service with one endpoint.
func oneServiceState() *dataplane.State {
	name := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "demo", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP}
	return &dataplane.State{
		Family: v1.IPv4Protocol,
		Node:   dataplane.Node{Name: "node-a", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: name, ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP,
		}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			name: {{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}},
		}),
	}
}

// chainOfKind returns the first nat chain named prefix+kind.
func chainOfKind(t *testing.T, fake *xtables.FakeRunner, kind string) string {
	t.Helper()
	for _, c := range fake.Ruleset().Chains("nat") {
		if strings.HasPrefix(c, DefaultChainPrefix+kind) {
			return c
		}
	}
	t.Fatalf("no %s chain", kind)
	return ""
}

// TestReconcile: each change another program makes is noticed by the
// canary, reported by name and repaired so that the tables equal what Sync
// wrote; a second Reconcile finds nothing and writes nothing. The fake
// numbers its changes as the nft backend's generation does; without that
// (the legacy backend) the canary notices only what removes its chain.
func TestReconcile(t *testing.T) {
	jumpOutput := `-m comment --comment "proxykit service portals" -j PK-SERVICES`
	for _, tc := range []struct {
		name string
		// disturb is restore input, with {SVC} and {SEP} standing for
		// the service's chains.
		disturb string
		want    []string
		// legacyChanged is whether the legacy canary notices it.
		legacyChanged bool
	}{{
		name: "untouched",
	}, {
		name:    "service chain flushed",
		disturb: "*nat\n-F {SVC}\nCOMMIT\n",
		want:    []string{"nat chain {SVC}: 0 rules, want 1"},
	}, {
		name:    "rule inserted into a shared chain",
		disturb: "*nat\n-I PK-SERVICES 1 -j RETURN\nCOMMIT\n",
		want:    []string{"nat chain PK-SERVICES: 3 rules, want 2"},
	}, {
		name:    "rule changed in place",
		disturb: "*nat\n-D {SEP} 1\n-I {SEP} 1 -m comment --comment \"demo/web:http\" -s 10.244.1.6 -j PK-MARK-MASQ\nCOMMIT\n",
		want:    []string{"nat chain {SEP}: rule 1 changed"},
	}, {
		name:    "jump deleted from a built-in chain",
		disturb: "*nat\n-D OUTPUT " + jumpOutput + "\nCOMMIT\n",
		want:    []string{"nat chain OUTPUT: jump to PK-SERVICES missing"},
	}, {
		name:    "stale service chain",
		disturb: "*nat\n:PK-SVC-AAAAAAAAAAAAAAAA - [0:0]\n-A PK-SVC-AAAAAAAAAAAAAAAA -j RETURN\nCOMMIT\n",
		want:    []string{"nat chain PK-SVC-AAAAAAAAAAAAAAAA: not programmed, deleted"},
	}, {
		name:    "table flushed",
		disturb: "*filter\n-F\nCOMMIT\n",
		want: []string{
			"filter chain FORWARD: jump to PK-EXTERNAL-SERVICES missing",
			"filter chain FORWARD: jump to PK-FORWARD missing",
			"filter chain FORWARD: jump to PK-PROXY-FIREWALL missing",
			"filter chain FORWARD: jump to PK-SERVICES missing",
			"filter chain INPUT: jump to PK-EXTERNAL-SERVICES missing",
			"filter chain INPUT: jump to PK-FIREWALL missing",
			"filter chain INPUT: jump to PK-NODEPORTS missing",
			"filter chain INPUT: jump to PK-PROXY-FIREWALL missing",
			"filter chain OUTPUT: jump to PK-EXTERNAL-SERVICES missing",
			"filter chain OUTPUT: jump to PK-FIREWALL missing",
			"filter chain OUTPUT: jump to PK-PROXY-FIREWALL missing",
			"filter chain OUTPUT: jump to PK-SERVICES missing",
			"filter chain PK-FORWARD: 0 rules, want 3",
			"filter chain PK-PROXY-CANARY: 0 rules, want 1",
		},
		legacyChanged: true,
	}, {
		name:          "canary deleted",
		disturb:       "*nat\n-F PK-PROXY-CANARY\n-X PK-PROXY-CANARY\nCOMMIT\n",
		want:          []string{"nat chain PK-PROXY-CANARY: missing"},
		legacyChanged: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d, fake := newFake(t, Config{})
			legacy, legacyFake := newFake(t, Config{})
			legacy.gens = newGenerations(plainRunner{legacyFake})
			ctx := t.Context()
			if err := legacy.Sync(ctx, oneServiceState()); err != nil {
				t.Fatal(err)
			}
			if err := d.Sync(ctx, oneServiceState()); err != nil {
				t.Fatal(err)
			}
			svc, sep := chainOfKind(t, fake, kindSVC), chainOfKind(t, fake, kindSEP)
			name := strings.NewReplacer("{SVC}", svc, "{SEP}", sep)
			before := string(fake.Ruleset().Save("nat")) + string(fake.Ruleset().Save("filter"))
			// A first Reconcile remembers every chain as verified: the
			// disturbance must be found all the same.
			if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
				t.Fatalf("Reconcile after Sync = %v, %v", drift, err)
			}
			if tc.disturb != "" {
				if err := fake.Restore(ctx, xtables.RestoreBytes(name.Replace(tc.disturb))); err != nil {
					t.Fatal(err)
				}
			}
			if changed, err := d.KernelChanged(ctx); err != nil || changed != (tc.disturb != "") {
				t.Errorf("KernelChanged = %v, %v; want %v", changed, err, tc.disturb != "")
			}
			if tc.disturb != "" {
				if err := legacyFake.Restore(ctx, xtables.RestoreBytes(name.Replace(tc.disturb))); err != nil {
					t.Fatal(err)
				}
			}
			if changed, err := legacy.KernelChanged(ctx); err != nil || changed != tc.legacyChanged {
				t.Errorf("legacy KernelChanged = %v, %v; want %v", changed, err, tc.legacyChanged)
			}
			restores := len(fake.Restores())
			drift, err := d.Reconcile(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, name.Replace(w))
			}
			if diff := cmp.Diff(dataplane.Drift{Repaired: want}, drift); diff != "" {
				t.Errorf("Drift (-want +got):\n%s", diff)
			}
			if wrote, want := len(fake.Restores()) > restores, tc.disturb != ""; wrote != want {
				t.Errorf("Reconcile ran a restore: %v, want %v", wrote, want)
			}
			after := string(fake.Ruleset().Save("nat")) + string(fake.Ruleset().Save("filter"))
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("tables after the repair differ from what Sync wrote (-synced +repaired):\n%s", diff)
			}
			if changed, err := d.KernelChanged(ctx); err != nil || changed {
				t.Errorf("KernelChanged after the repair = %v, %v", changed, err)
			}
			restores = len(fake.Restores())
			if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() || len(fake.Restores()) != restores {
				t.Errorf("second Reconcile = %v, %v, wrote %v", drift, err, len(fake.Restores()) != restores)
			}
		})
	}
}

// plainRunner hides the FakeRunner's generation, as the legacy backend
// has none.
type plainRunner struct{ xtables.Runner }

// failingSave fails every Save.
type failingSave struct{ *xtables.FakeRunner }

func (failingSave) Save(context.Context, string) ([]byte, error) {
	return nil, errors.New("iptables-save: lock held")
}

// TestReconcileEdges: nothing to compare before the first Sync and after
// Cleanup; a kernel that cannot be read fails the Reconcile and makes the
// next Sync a full one.
func TestReconcileEdges(t *testing.T) {
	d, fake := newFake(t, Config{})
	ctx := t.Context()
	if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
		t.Errorf("Reconcile before Sync = %v, %v", drift, err)
	}
	if changed, err := d.KernelChanged(ctx); err != nil || changed {
		t.Errorf("KernelChanged before Sync = %v, %v", changed, err)
	}
	s := oneServiceState()
	if err := d.Sync(ctx, s); err != nil {
		t.Fatal(err)
	}
	d.runner = failingSave{fake}
	if _, err := d.Reconcile(ctx); err == nil || !strings.Contains(err.Error(), "lock held") {
		t.Errorf("Reconcile with a failing save = %v", err)
	}
	d.runner = fake
	if err := d.Sync(ctx, s); err != nil || !d.LastSync().Full {
		t.Errorf("Sync after a failed Reconcile: %v, full %v; want a full sync", err, d.LastSync().Full)
	}
	if err := d.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
		t.Errorf("Reconcile after Cleanup = %v, %v", drift, err)
	}
}

// TestSettingSkipsReportedOncePerChange: a setting the dataplane cannot use
// (here a cluster-CIDR detector without a CIDR of the family) is reported
// when the settings take effect, not on every partial sync after.
func TestSettingSkipsReportedOncePerChange(t *testing.T) {
	var skips []string
	d, _ := newFake(t, Config{OnSkip: func(r string) { skips = append(skips, r) }})
	for i := range 3 {
		next := oneServiceState()
		next.Settings.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR}
		next.Generation = uint64(i + 1)
		if err := d.Sync(t.Context(), next); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"local traffic detector has no CIDR of this family"}, skips); diff != "" {
		t.Errorf("skips (-want +got):\n%s", diff)
	}
}

// TestReconcileAfterPartialSync: a chain a partial sync rewrote is compared
// again rule by rule, not trusted from an earlier Reconcile.
func TestReconcileAfterPartialSync(t *testing.T) {
	d, fake := newFake(t, Config{})
	ctx := t.Context()
	r := rand.New(rand.NewPCG(3, 4))
	svcs := map[int]genService{0: genSvc(r, 0), 1: genSvc(r, 1)}
	settings := genSettings(r)
	if err := d.Sync(ctx, makeState(settings, svcs)); err != nil {
		t.Fatal(err)
	}
	if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
		t.Fatalf("Reconcile = %v, %v", drift, err)
	}
	svcs[1] = genSvc(r, 1)
	if err := d.Sync(ctx, makeState(settings, svcs)); err != nil {
		t.Fatal(err)
	}
	if d.LastSync().Full {
		t.Fatal("the change was a full sync")
	}
	d.mu.Lock()
	for key := range d.prog.verified {
		if !slices.Contains(fake.Ruleset().Chains(strings.Fields(key)[0]), strings.Fields(key)[1]) {
			t.Errorf("chain %s is gone but still verified", key)
		}
	}
	d.mu.Unlock()
	if drift, err := d.Reconcile(ctx); err != nil || !drift.Empty() {
		t.Errorf("Reconcile after the partial sync = %v, %v", drift, err)
	}
}

// TestWarnSlowBackend: a large ruleset on iptables-nft is warned about
// once; legacy, or a small ruleset, is not.
func TestWarnSlowBackend(t *testing.T) {
	for _, tc := range []struct {
		backend   string
		endpoints int
		want      int
	}{{"nft", 6000, 1}, {"nft", 100, 0}, {"legacy", 6000, 0}} {
		var lines []string
		log := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{})
		d, _ := newFake(t, Config{Logger: log})
		d.runner = backendRunner{xtables.NewFakeRunner(), tc.backend}
		for range 2 {
			d.warnSlowBackend(&programmed{endpoints: tc.endpoints})
		}
		if len(lines) != tc.want {
			t.Errorf("%s, %d endpoints: %d warnings, want %d: %q", tc.backend, tc.endpoints, len(lines), tc.want, lines)
		}
	}
}

// TestForcedFullReusesRenderExactly: full syncs that reuse the renderings
// of unchanged services write, byte for byte, what a dataplane rendering
// everything from scratch writes for the same State. States from a
// Builder share unchanged services, so all but the changed one are
// reused; States made by hand share nothing, and must come out the same.
func TestForcedFullReusesRenderExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	settings := genSettings(r)
	svcs := map[int]genService{}
	for i := range 30 {
		svcs[i] = genSvc(r, i)
	}
	cluster, first := benchBuilder(40, 3)
	for _, tc := range []struct {
		name  string
		first *dataplane.State
		next  func() *dataplane.State
		reuse int
	}{{
		name:  "builder",
		first: first,
		next:  func() *dataplane.State { return changeOneEndpoint(cluster, r.IntN(40), r.IntN(3)) },
		reuse: 39,
	}, {
		name:  "by hand",
		first: makeState(settings, svcs),
		next: func() *dataplane.State {
			if i := r.IntN(40); r.IntN(4) == 0 {
				delete(svcs, i)
			} else {
				svcs[i] = genSvc(r, i)
			}
			return makeState(settings, svcs)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d, fake := newFake(t, Config{})
			ctx := t.Context()
			st := tc.first
			for step := range 20 {
				if step > 0 {
					st = tc.next()
				}
				forceFull(d)
				before := d.cache
				if err := d.Sync(ctx, st); err != nil {
					t.Fatal(err)
				}
				if before != nil && tc.reuse > 0 {
					reused := 0
					for nn, e := range d.cache.services {
						if old, ok := before.services[nn]; ok && old.st == e.st {
							reused++
						}
					}
					if reused < tc.reuse {
						t.Errorf("step %d: %d services' renderings reused, want %d", step, reused, tc.reuse)
					}
				}
				all := fake.Restores()
				fresh, _ := newFake(t, Config{})
				want, err := fresh.Render(st)
				if err != nil {
					t.Fatal(err)
				}
				// The kernel holds the jumps after the first sync, and
				// may hold stale chains: compare the chains alone.
				if diff := cmp.Diff(ownChainLines(want), ownChainLines(all[len(all)-1])); diff != "" {
					t.Fatalf("step %d: full sync with reused renderings differs from a fresh render (-fresh +reused):\n%s", step, diff)
				}
			}
		})
	}
}

// ownChainLines drops what depends on the kernel's previous content (jump
// insertions, stale chain deletions and their declarations).
func ownChainLines(data []byte) string {
	var b strings.Builder
	stale := map[string]bool{}
	for line := range strings.Lines(string(data)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "-X "); ok {
			stale[name] = true
		}
	}
	for line := range strings.Lines(string(data)) {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "-I ") || strings.HasPrefix(l, "-X ") {
			continue
		}
		if name, _, ok := strings.Cut(strings.TrimPrefix(l, ":"), " "); ok && strings.HasPrefix(l, ":") && stale[name] {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// backendRunner is a FakeRunner that says which iptables backend it runs.
type backendRunner struct {
	*xtables.FakeRunner
	backend string
}

func (r backendRunner) Backend() string { return r.backend }
