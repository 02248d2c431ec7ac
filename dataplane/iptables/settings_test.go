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

// TestConfigRefusesWhatRulesCannotHold: each configured value written into
// the restore input is checked by New.
func TestConfigRefusesWhatRulesCannotHold(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ChainPrefix: "PK\n-A INPUT -j ACCEPT\n#"}, `iptables: chain prefix "PK\n-A INPUT -j ACCEPT\n#" is too long: at most 11 characters`},
		{Config{ChainPrefix: "PK\n"}, `iptables: chain prefix "PK\n": only A-Z, 0-9, '-' and '_' are allowed`},
		{Config{ChainPrefix: "PK X-"}, `iptables: chain prefix "PK X-": only A-Z, 0-9, '-' and '_' are allowed`},
		{Config{ChainPrefix: `PK"-`}, `iptables: chain prefix "PK\"-": only A-Z, 0-9, '-' and '_' are allowed`},
		{Config{ChainPrefix: "KUBE-"}, `iptables: chain prefix "KUBE-" would share chains with kube-proxy`},
		{Config{MasqueradeBit: 32}, "iptables: masquerade bit 32 out of range [0, 31]"},
	} {
		tc.cfg.Runner = xtables.NewFakeRunner()
		if _, err := New(tc.cfg); fmt.Sprint(err) != tc.want {
			t.Errorf("New(%q) = %v, want %s", tc.cfg.ChainPrefix, err, tc.want)
		}
	}
}
