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
