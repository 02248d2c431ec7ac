package userspace

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

// TestRefusesInvalidSettings: in redirect mode, a State whose settings
// hold a value no rule may hold is refused with an error, where the
// local-traffic detector's interface used to be written verbatim into
// the iptables-restore input.
func TestRefusesInvalidSettings(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			r, routing := xtables.NewFakeRunner(), &FakePolicyRouting{}
			d := newDataplane(t, newBackends(t), Config{Family: fam, Redirect: &RedirectConfig{Runner: r, Routing: routing}})
			dataplanetest.CheckRefusesInvalidSettings(t, d, fam, func() string {
				rs := r.Ruleset()
				return fmt.Sprintf("%d restores\n%s%s%s%v\n%d listeners", len(r.Restores()),
					rs.Save("mangle"), rs.Save("nat"), rs.Save("filter"), routing.Installed(), len(d.Listeners()))
			})
			for _, in := range r.Restores() {
				if bytes.Contains(in, []byte("-A INPUT -j ACCEPT")) {
					t.Errorf("a restore input holds the injected rule:\n%s", in)
				}
			}
		})
	}
}

// TestRedirectConfigRefusesWhatRulesCannotHold: each configured value
// written into the redirect rules or the policy route is checked by New.
func TestRedirectConfigRefusesWhatRulesCannotHold(t *testing.T) {
	for _, tc := range []struct {
		cfg  RedirectConfig
		want string
	}{
		{RedirectConfig{ChainPrefix: "PKU\n-A INPUT -j ACCEPT"}, `userspace: RedirectConfig.ChainPrefix "PKU\n-A INPUT -j ACCEPT": want at most 16 characters of A-Z, 0-9, '-' and '_'`},
		{RedirectConfig{ChainPrefix: "PKU "}, `userspace: RedirectConfig.ChainPrefix "PKU ": want at most 16 characters of A-Z, 0-9, '-' and '_'`},
		{RedirectConfig{ChainPrefix: `PKU"`}, `userspace: RedirectConfig.ChainPrefix "PKU\"": want at most 16 characters of A-Z, 0-9, '-' and '_'`},
		{RedirectConfig{ChainPrefix: "ABCDEFGHIJKLMNOPQ"}, `userspace: RedirectConfig.ChainPrefix "ABCDEFGHIJKLMNOPQ": want at most 16 characters of A-Z, 0-9, '-' and '_'`},
		{RedirectConfig{RouteTable: 254}, "userspace: RedirectConfig.RouteTable 254: want a table of its own, not 253-255 (the kernel's)"},
		{RedirectConfig{RulePriority: 32766}, "userspace: RedirectConfig.RulePriority 32766: want 1 to 32765, ahead of the main table's rule"},
	} {
		tc.cfg.Runner, tc.cfg.Routing = xtables.NewFakeRunner(), &FakePolicyRouting{}
		if _, err := New(Config{Redirect: &tc.cfg}); fmt.Sprint(err) != tc.want {
			t.Errorf("New(%+v) = %v, want %s", tc.cfg, err, tc.want)
		}
	}
}
