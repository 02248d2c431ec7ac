package xtables

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRestoreError(t *testing.T) {
	data := []byte("*nat\n:A - [0:0]\n-A A -j B\n-A A -j C\nCOMMIT\n")
	exitErr := exec.Command("false").Run()
	for _, tc := range []struct {
		name, output string
		line         int
	}{
		{"legacy", "iptables-restore: line 3 failed\n", 3},
		{"nft", "iptables-nft-restore: line 4 failed: Bad rule (does a matching rule exist in that chain?).\n", 4},
		{"parser", "iptables-restore v1.8.9 (nf_tables): Chain 'B' does not exist\nError occurred at line: 3\nTry `iptables-restore -h' for more information.\n", 3},
		{"unknown", "Another app is currently holding the xtables lock.\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := parseRestoreError(data, []byte(tc.output), exitErr)
			if e.Line != tc.line {
				t.Errorf("line = %d, want %d", e.Line, tc.line)
			}
			if tc.line == 3 {
				want := []string{"  1: *nat", "  2: :A - [0:0]", "> 3: -A A -j B", "  4: -A A -j C", "  5: COMMIT", "  6: "}
				if d := cmp.Diff(want, e.Context); d != "" {
					t.Errorf("context (-want +got):\n%s", d)
				}
			}
			if !errors.Is(e, exitErr) || !strings.Contains(e.Error(), "iptables-restore failed") {
				t.Errorf("error %q does not wrap the exec error", e)
			}
		})
	}
}
