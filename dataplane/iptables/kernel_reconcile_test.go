package iptables

import (
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/netns"
)

// TestKernelReconcileRepairs changes a real kernel's rules behind the
// dataplane's back with the iptables command, as an administrator or a
// firewall reload would, with both backends: the canary notices each (the
// nft backend's by the ruleset generation, legacy's by the tables'
// summaries), Reconcile names what it repaired, and
// afterwards the tables hold exactly what a fresh full sync of the same
// State writes into another namespace.
func TestKernelReconcileRepairs(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "iptables")
	for _, variant := range []string{"nft", "legacy"} {
		t.Run(variant, func(t *testing.T) {
			if _, err := exec.LookPath("iptables-" + variant + "-restore"); err != nil {
				netns.Require(t, "iptables-"+variant+"-restore")
			}
			ipt := "iptables-" + variant
			r := rand.New(rand.NewPCG(11, 12))
			svcs := map[int]genService{}
			for i := range 20 {
				svcs[i] = genSvc(r, i)
			}
			st := makeState(genSettings(r), svcs)
			node, ref := netns.New(t, "drift"), netns.New(t, "driftref")
			dp := newNSDataplane(t, node, Config{Runner: mustRunner(t, node, variant)})
			want := newNSDataplane(t, ref, Config{Runner: mustRunner(t, ref, variant)})
			ctx := t.Context()
			for _, d := range []*nsDataplane{dp, want} {
				if err := d.Sync(ctx, st); err != nil {
					t.Fatal(err)
				}
			}
			save := func(ns *netns.NS) map[string][]string { return savedRules(t, ns, "iptables-"+variant+"-save") }
			svc := ""
			for key := range save(node) {
				if c := strings.TrimPrefix(key, "nat "); strings.HasPrefix(c, DefaultChainPrefix+kindSVC) {
					svc = c
				}
			}
			for _, tc := range []struct {
				name string
				cmds [][]string
			}{
				{"firewall reload", [][]string{{"-t", "nat", "-F"}, {"-t", "nat", "-X"}, {"-F"}, {"-X"}}},
				{"iptables -F", [][]string{{"-F"}}},
				{"service chain flushed", [][]string{{"-t", "nat", "-F", svc}}},
				{"rule inserted", [][]string{{"-t", "nat", "-I", svc, "1", "-j", "RETURN"}}},
				{"jump deleted", [][]string{{"-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment", "proxykit service portals", "-j", DefaultChainPrefix + "SERVICES"}}},
			} {
				for _, c := range tc.cmds {
					node.MustRun(ipt, append([]string{"-w", "5"}, c...)...)
				}
				if changed, err := dp.KernelChanged(ctx); err != nil || !changed {
					t.Errorf("%s: KernelChanged = %v, %v; want true", tc.name, changed, err)
				}
				drift, err := dp.Reconcile(ctx)
				if err != nil {
					t.Fatalf("%s: Reconcile: %v", tc.name, err)
				}
				if drift.Empty() {
					t.Errorf("%s: Reconcile found no drift", tc.name)
				}
				t.Logf("%s: %d repairs: %s", tc.name, len(drift.Repaired), drift)
				if diff := cmpDiff(save(ref), save(node)); diff != "" {
					t.Errorf("%s: repaired tables differ from a full sync (-full +repaired):\n%s", tc.name, diff)
				}
				if drift, err := dp.Reconcile(ctx); err != nil || !drift.Empty() {
					t.Errorf("%s: second Reconcile: %v, %s", tc.name, err, drift)
				}
				kernel := map[string]float64{"nat": 0, "filter": 0}
				for key, rules := range save(node) {
					table, chain, _ := strings.Cut(key, " ")
					if strings.HasPrefix(chain, DefaultChainPrefix) && chain != DefaultChainPrefix+"PROXY-CANARY" {
						kernel[table] += float64(len(rules))
					}
				}
				if diff := cmp.Diff(kernel, gauges(dp.metrics.rules)); diff != "" {
					t.Errorf("%s: rules gauge differs from the kernel (-kernel +gauge):\n%s", tc.name, diff)
				}
			}
		})
	}
}

func mustRunner(t *testing.T, ns *netns.NS, variant string) xtables.Runner {
	t.Helper()
	var r *xtables.ExecRunner
	if err := ns.Do(func() (err error) {
		r, err = xtables.NewExecRunner(xtables.ExecConfig{Variant: variant})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestKernelRestoreDeadline: a restore that outlives the deadline its size
// allows is killed, fails the sync with a *RestoreError saying so, is
// counted, and leaves the kernel as it was.
func TestKernelRestoreDeadline(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "iptables")
	node := netns.New(t, "deadline")
	var r *xtables.ExecRunner
	if err := node.Do(func() (err error) {
		r, err = xtables.NewExecRunner(xtables.ExecConfig{RestoreTimeout: func(int) time.Duration { return time.Nanosecond }})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	dp := newNSDataplane(t, node, Config{Runner: r, Registerer: reg})
	err := dp.Sync(t.Context(), oneServiceState())
	var re *xtables.RestoreError
	if !errors.As(err, &re) || re.Timeout != time.Nanosecond || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sync = %v, want a xtables.RestoreError with Timeout 1ns", err)
	}
	if !strings.Contains(err.Error(), "did not finish within 1ns") {
		t.Errorf("error %q does not say what happened", err)
	}
	if got := testutil.ToFloat64(dp.metrics.restoreTimeouts); got != 1 {
		t.Errorf("restore timeouts = %v, want 1", got)
	}
	for key := range kernelRules(t, node, false) {
		if strings.Contains(key, DefaultChainPrefix) {
			t.Errorf("the killed restore left %s", key)
		}
	}
}
