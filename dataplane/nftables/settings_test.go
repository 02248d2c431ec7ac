package nftables

import (
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
)

// TestRefusesInvalidSettings: a State whose settings hold a value no rule
// may hold is refused with an error, where the local-traffic detector's
// interface used to be left out of the rules with a V(1) line; Render
// refuses it too.
func TestRefusesInvalidSettings(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			fake := newFake(fam == v1.IPv6Protocol)
			d, err := New(Config{Family: fam, NFT: fake})
			if err != nil {
				t.Fatal(err)
			}
			dataplanetest.CheckRefusesInvalidSettings(t, d, fam, fake.Dump)
			for name, set := range dataplanetest.InvalidSettings() {
				if out, err := d.Render(&dataplane.State{Family: fam, Settings: set}); err == nil {
					t.Errorf("%s: Render accepted the settings:\n%s", name, out)
				}
			}
		})
	}
}
