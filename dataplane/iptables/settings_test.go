package iptables

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// TestRefusesInvalidSettings: a State whose settings hold a value no rule
// may hold is refused with an error, where the local-traffic detector's
// interface used to be left out of the rules with a V(1) line; Render
// refuses it too, and nothing written ever holds the injected rule.
func TestRefusesInvalidSettings(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			r := xtables.NewFakeRunner()
			d, err := New(Config{Family: fam, Runner: r})
			if err != nil {
				t.Fatal(err)
			}
			dataplanetest.CheckRefusesInvalidSettings(t, d, fam, func() string { return fakeDump(r) })
			for name, set := range dataplanetest.InvalidSettings() {
				st := &dataplane.State{Family: fam, Settings: set}
				if out, err := d.Render(st); err == nil {
					t.Errorf("%s: Render accepted the settings:\n%s", name, out)
				}
			}
			for _, in := range r.Restores() {
				if bytes.Contains(in, []byte("-A INPUT -j ACCEPT")) {
					t.Errorf("a restore input holds the injected rule:\n%s", in)
				}
			}
		})
	}
}

// fakeDump is what r holds: its restore inputs so far and its tables.
func fakeDump(r *xtables.FakeRunner) string {
	rs := r.Ruleset()
	return fmt.Sprintf("%d restores\n%s%s%s", len(r.Restores()), rs.Save("nat"), rs.Save("filter"), rs.Save("mangle"))
}
