package iptables

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// ownRules counts the rules in the fake kernel's chains of the default
// prefix, per table: what the rules gauge must say.
func ownRules(fake *xtables.FakeRunner) map[string]float64 {
	out := map[string]float64{}
	rs := fake.Ruleset()
	for _, table := range tableNames {
		for _, c := range rs.Chains(table) {
			if strings.HasPrefix(c, DefaultChainPrefix) && c != DefaultChainPrefix+"PROXY-CANARY" {
				out[table] += float64(len(rs.Rules(table, c)))
			}
		}
	}
	return out
}

func gauges(g [numTables]prometheus.Gauge) map[string]float64 {
	out := map[string]float64{}
	for t, name := range tableNames {
		out[name] = testutil.ToFloat64(g[t])
	}
	return out
}

// TestMetricsCountRules: after full and random partial syncs the rules
// gauge equals the rules really in the dataplane's chains, the last-sync
// gauge counts what the restore wrote, and restore failures are counted by
// kind of sync.
func TestMetricsCountRules(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	d, fake := newFake(t, Config{Registerer: reg})
	if _, err := New(Config{Family: v1.IPv6Protocol, Runner: xtables.NewFakeRunner(), Registerer: reg}); err != nil {
		t.Fatalf("a second family's Dataplane on the same Registerer: %v", err)
	}
	ctx := t.Context()
	r := rand.New(rand.NewPCG(5, 6))
	settings := genSettings(r)
	svcs := map[int]genService{}
	for i := range 6 {
		svcs[i] = genSvc(r, i)
	}
	restores := 0
	check := func(step string) {
		t.Helper()
		if d := cmp.Diff(ownRules(fake), gauges(d.metrics.rules)); d != "" {
			t.Errorf("%s: rules gauge differs from the kernel (-kernel +gauge):\n%s", step, d)
		}
		var written [numTables]int
		if all := fake.Restores(); len(all) > restores {
			written, restores = countWritten(all[len(all)-1], mustNames()), len(all)
		}
		if d := cmp.Diff(map[string]float64{"nat": float64(written[tableNAT]), "filter": float64(written[tableFilter])},
			gauges(d.metrics.rulesLastSync)); d != "" {
			t.Errorf("%s: last-sync gauge (-restore +gauge):\n%s", step, d)
		}
	}
	if err := d.Sync(ctx, makeState(settings, svcs)); err != nil {
		t.Fatal(err)
	}
	check("full sync")
	partials := 0
	for step := range 30 {
		switch i := r.IntN(10); r.IntN(3) {
		case 0:
			delete(svcs, i)
		default:
			svcs[i] = genSvc(r, i)
		}
		if err := d.Sync(ctx, makeState(settings, svcs)); err != nil {
			t.Fatal(err)
		}
		if !d.LastSync().Full {
			partials++
		}
		check("step " + string(rune('a'+step)))
	}

	fake.Fail = func([]byte) error { return errors.New("injected") }
	svcs[20] = genSvc(r, 20)
	_ = d.Sync(ctx, makeState(settings, svcs)) // partial, fails
	_ = d.Sync(ctx, makeState(settings, svcs)) // full, fails
	fake.Fail = nil
	if err := d.Sync(ctx, makeState(settings, svcs)); err != nil {
		t.Fatal(err)
	}
	check("recovery")

	for _, tc := range []struct {
		kind string
		m    prometheus.Collector
		want float64
	}{
		{"partial restore failures", d.metrics.partialRestoreFailures, 1},
		{"full restore failures", d.metrics.fullRestoreFailures, 1},
	} {
		if got := testutil.ToFloat64(tc.m); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.kind, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "proxykit_iptables_rules"); n != 2*2 {
		t.Errorf("rules series = %d, want 4 (two families, two tables)", n)
	}
	if partials == 0 {
		t.Error("no partial sync happened")
	}

	if err := d.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]float64{"nat": 0, "filter": 0}, gauges(d.metrics.rules)); d != "" {
		t.Errorf("rules after Cleanup (-want +got):\n%s", d)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
