package nftables

import (
	"fmt"
	"strings"
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

// TestConfigRefusesWhatRulesCannotHold: each configured value written into
// the table is checked by New.
func TestConfigRefusesWhatRulesCannotHold(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Table: "proxykit\nadd rule ip filter input accept"}, `nftables: table name "proxykit\nadd rule ip filter input accept": want at most 64 characters of a-z, A-Z, 0-9, '-' and '_'`},
		{Config{Table: "proxy kit"}, `nftables: table name "proxy kit": want at most 64 characters of a-z, A-Z, 0-9, '-' and '_'`},
		{Config{Table: `proxy"kit`}, `nftables: table name "proxy\"kit": want at most 64 characters of a-z, A-Z, 0-9, '-' and '_'`},
		{Config{Table: strings.Repeat("t", 65)}, `nftables: table name "` + strings.Repeat("t", 65) + `": want at most 64 characters of a-z, A-Z, 0-9, '-' and '_'`},
		{Config{Table: "kube-proxy"}, `nftables: table "kube-proxy" belongs to kube-proxy`},
		{Config{MasqueradeBit: 32}, "nftables: masquerade bit 32 out of range [0, 31]"},
	} {
		tc.cfg.NFT = newFake(false)
		if _, err := New(tc.cfg); fmt.Sprint(err) != tc.want {
			t.Errorf("New(%q) = %v, want %s", tc.cfg.Table, err, tc.want)
		}
	}
}
