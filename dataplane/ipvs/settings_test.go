package ipvs

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
)

// TestRefusesInvalidSettings: a State whose settings hold a value no rule
// may hold is refused with an error, where the local-traffic detector's
// interface used to be written verbatim into the iptables-restore input:
// a bridge named "br0\n-A INPUT -j ACCEPT\n#" added a rule.
func TestRefusesInvalidSettings(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			d, f := newFakeDataplane(t, Config{Family: fam})
			dataplanetest.CheckRefusesInvalidSettings(t, d, fam, func() string {
				rs := f.runner.Ruleset()
				return fmt.Sprintf("%d restores\n%s%s%s", len(f.runner.Restores()), rs.Save("nat"), rs.Save("filter"), f.ipvs.Dump())
			})
			for _, in := range f.runner.Restores() {
				if bytes.Contains(in, []byte("-A INPUT -j ACCEPT")) {
					t.Errorf("a restore input holds the injected rule:\n%s", in)
				}
			}
		})
	}
}
