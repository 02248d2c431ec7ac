package iptables

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/xtables"
)

// TestHookedChains pins the built-in chains Cleanup may remove to those the
// dataplane jumps from.
func TestHookedChains(t *testing.T) {
	d, _ := newFake(t, Config{})
	got := map[string][]string{"nat": xtables.HookedChains(d.jumps(), "nat"), "filter": xtables.HookedChains(d.jumps(), "filter")}
	want := map[string][]string{"nat": {"OUTPUT", "POSTROUTING", "PREROUTING"}, "filter": {"FORWARD", "INPUT", "OUTPUT"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hooked chains (-want +got):\n%s", diff)
	}
}
