package iptables

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
)

// TestKernelMangleListing: the mangle rules of TestMangleRoundTrip, restored
// into a real kernel, are listed back by iptables-save exactly as that
// test takes it to list them.
func TestKernelMangleListing(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save")
	for _, tc := range []struct {
		name, tool, input, saved string
	}{
		{"IPv4", "iptables", tproxyMangle4, tproxyMangle4Saved},
		{"IPv6", "ip6tables", tproxyMangle6, tproxyMangle6Saved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := netns.New(t, "mangle")
			mangle, _, _ := strings.Cut(tc.input, "COMMIT\n")
			restore := ns.Command(tc.tool+"-restore", "--noflush")
			restore.Stdin = strings.NewReader(mangle + "COMMIT\n")
			if out, err := restore.CombinedOutput(); err != nil {
				msg := tc.tool + "-restore of TPROXY rules failed (the kernel may lack xt_TPROXY): " + err.Error() + ": " + string(out)
				if os.Getenv(netns.RequireKernelEnv) == "1" {
					t.Fatal(msg)
				}
				t.Skip(msg)
			}
			var got []string
			for l := range strings.Lines(ns.MustRun(tc.tool+"-save", "-t", "mangle")) {
				if !strings.HasPrefix(l, "#") {
					got = append(got, l)
				}
			}
			if diff := cmp.Diff(tc.saved, strings.Join(got, "")); diff != "" {
				t.Errorf("%s-save (-want +got):\n%s", tc.tool, diff)
			}
		})
	}
}
