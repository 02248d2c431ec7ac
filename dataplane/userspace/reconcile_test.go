package userspace

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/xtables"
)

// legacyRunner hides the fake's generation, as iptables-legacy has none.
type legacyRunner struct{ xtables.Runner }

// TestPartialWriteKeepsForeignChangesVisible checks that a write of a few
// rules, made after someone else changed the redirect chains, does not take
// that change for the dataplane's own: the canary still sees it, Reconcile
// reports it, and the chains end as a fresh write leaves them.
func TestPartialWriteKeepsForeignChangesVisible(t *testing.T) {
	requireTransparent(t)
	foreign := map[string]string{
		"foreign rule atop a chain": "*nat\n-I PKU-SERVICES 1 -j RETURN\nCOMMIT\n",
		"flushed chain":             "*mangle\n-F PKU-TPROXY\nCOMMIT\n",
	}
	for name, change := range foreign {
		for _, legacy := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: " (legacy)"}[legacy], func(t *testing.T) {
				fake := xtables.NewFakeRunner()
				var runner xtables.Runner = fake
				if legacy {
					runner = legacyRunner{fake}
				}
				c := newCluster()
				c.service("web", "10.96.0.10", nil, "http/TCP/80")
				c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
				c.service("dns", "10.96.0.11", nil, "dns/UDP/53")
				c.endpoints("dns", []string{"10.0.0.1"}, "dns/UDP/53")
				d := newDataplane(t, newBackends(t), Config{Redirect: &RedirectConfig{Runner: runner, Routing: &FakePolicyRouting{}}})
				mustSync(t, d, c.build())
				want := saveAll(t, fake)

				if err := fake.Restore(t.Context(), xtables.RestoreBytes(change)); err != nil {
					t.Fatal(err)
				}
				// dns loses its endpoints: its diversions give way to a
				// REJECT, a write of a few rules.
				c.endpoints("dns", nil, "dns/UDP/53")
				mustSync(t, d, c.build())
				c.endpoints("dns", []string{"10.0.0.1"}, "dns/UDP/53")
				mustSync(t, d, c.build())

				changed, err := d.KernelChanged(t.Context())
				if err != nil || !changed {
					t.Errorf("KernelChanged = %v, %v; want true", changed, err)
				}
				drift, err := d.Reconcile(t.Context())
				if err != nil || len(drift.Repaired) == 0 {
					t.Errorf("Reconcile = %+v, %v; want what was repaired", drift, err)
				}
				if diff := cmp.Diff(want, saveAll(t, fake)); diff != "" {
					t.Errorf("rules after Reconcile (-fresh +got):\n%s", diff)
				}
				if changed, err := d.KernelChanged(t.Context()); err != nil || changed {
					t.Errorf("after Reconcile, KernelChanged = %v, %v; want false", changed, err)
				}
			})
		}
	}
}

// saveAll returns the rules of the tables redirect mode writes, with the
// forwarders' ports blanked.
func saveAll(t *testing.T, fake *xtables.FakeRunner) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range redirectTables {
		save, err := fake.Save(t.Context(), table)
		if err != nil {
			t.Fatal(err)
		}
		out[table] = sortRuleLines(blankPorts(string(save)))
	}
	return out
}

// TestForeignChangeFoundByAFailedWrite: a write that found someone else's
// change and then failed does not make the canary report it at every poll
// (each calling for a Reconcile that cannot run before a good write); the
// next good write repairs it, and one Reconcile reports it then.
func TestForeignChangeFoundByAFailedWrite(t *testing.T) {
	requireTransparent(t)
	fake := xtables.NewFakeRunner()
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	c.service("dns", "10.96.0.11", nil, "dns/UDP/53")
	c.endpoints("dns", []string{"10.0.0.1"}, "dns/UDP/53")
	d := newDataplane(t, newBackends(t), Config{Redirect: &RedirectConfig{Runner: fake, Routing: &FakePolicyRouting{}}})
	mustSync(t, d, c.build())
	if err := fake.Restore(t.Context(), xtables.RestoreBytes("*nat\n-I PKU-SERVICES 1 -j RETURN\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	fake.Fail = func([]byte) error { return errors.New("injected") }
	c.endpoints("dns", nil, "dns/UDP/53")
	if err := d.Sync(t.Context(), c.build()); err == nil {
		t.Fatal("Sync with a failing restore succeeded")
	}
	for range 3 {
		if changed, err := d.KernelChanged(t.Context()); err != nil || changed {
			t.Errorf("after a failed write, KernelChanged = %v, %v; want false until a good one", changed, err)
		}
	}
	fake.Fail = nil
	mustSync(t, d, c.build())
	if changed, err := d.KernelChanged(t.Context()); err != nil || !changed {
		t.Errorf("after the good write, KernelChanged = %v, %v; want true", changed, err)
	}
	if drift, err := d.Reconcile(t.Context()); err != nil || len(drift.Repaired) == 0 {
		t.Errorf("Reconcile = %+v, %v; want what the write repaired", drift, err)
	}
	if changed, err := d.KernelChanged(t.Context()); err != nil || changed {
		t.Errorf("after Reconcile, KernelChanged = %v, %v; want false", changed, err)
	}
}
