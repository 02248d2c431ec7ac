package suite

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// specNames reads the full names of the groups' specs in k8s.io/kubernetes
// v1.37.2, as `e2e.test --list-tests` prints them.
func specNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/specs-v1.37.2.txt")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// selectionCounts is how many specs a focus selects, leaves out, and runs
// (more than skipping themselves) on one, two and three nodes.
type selectionCounts struct {
	Selected, LeftOut int
	Runs              [3]int
}

func countSelection(names []string, f Focus, sctp bool) selectionCounts {
	var c selectionCounts
	skipped := Skipped(sctp)
	for _, n := range names {
		if !f.Selects(n) {
			continue
		}
		c.Selected++
		if _, ok := skipped[n]; ok {
			c.LeftOut++
			continue
		}
		need, _ := NodesNeeded(n)
		for nodes := 1; nodes <= 3; nodes++ {
			if need <= nodes {
				c.Runs[nodes-1]++
			}
		}
	}
	return c
}

func TestSelectionCounts(t *testing.T) {
	names := specNames(t)
	tests := []struct {
		focus Focus
		sctp  bool
		want  selectionCounts
	}{
		// 51 Services, 20 Granular Checks, 7 Conntrack, 2 KubeProxy.
		{FocusAll, false, selectionCounts{Selected: 80, LeftOut: 6, Runs: [3]int{36, 73, 74}}},
		{FocusAll, true, selectionCounts{Selected: 80, LeftOut: 2, Runs: [3]int{37, 77, 78}}},
		{FocusConformance, false, selectionCounts{Selected: 15, LeftOut: 0, Runs: [3]int{15, 15, 15}}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, countSelection(names, tt.focus, tt.sctp)); diff != "" {
			t.Errorf("focus %s, SCTP %v (-want +got):\n%s", tt.focus, tt.sctp, diff)
		}
	}
}

// TestTablesNameRealSpecs holds the hand-read tables to the suite's
// names: a spec renamed upstream must not silently fall out of them.
func TestTablesNameRealSpecs(t *testing.T) {
	names := map[string]bool{}
	for _, n := range specNames(t) {
		names[n] = true
	}
	for _, u := range Unrunnables() {
		if !names[u.Name] {
			t.Errorf("Unrunnables names %q, which is not a spec of the selection", u.Name)
		}
	}
	// NodesNeeded's Services names: 12 need two nodes, one three.
	needs := map[int]int{}
	for n := range names {
		if GroupOf(n) == GroupServices {
			need, why := NodesNeeded(n)
			needs[need]++
			if (need > 1) != (why != "") {
				t.Errorf("NodesNeeded(%q) = %d, %q", n, need, why)
			}
		}
	}
	if diff := cmp.Diff(map[int]int{1: 38, 2: 12, 3: 1}, needs); diff != "" {
		t.Errorf("Services specs by nodes needed (-want +got):\n%s", diff)
	}
}

// TestRegexpsSelectAsSelects checks the expressions ginkgo gets against
// Focus.Selects and Skipped, on the text ginkgo matches them to.
func TestRegexpsSelectAsSelects(t *testing.T) {
	names := specNames(t)
	// A spec of another block whose name shares a group's prefix.
	names = append(names, "[sig-network] Service endpoints latency should not be very high  [Conformance]",
		"[sig-network] ServiceCIDR and IPAddress API should support IPAddress API operations [Conformance]")
	for _, f := range []Focus{FocusAll, FocusConformance} {
		for _, sctp := range []bool{false, true} {
			skipped := Skipped(sctp)
			focus := regexp.MustCompile(f.Regexp())
			skip := regexp.MustCompile(SkipRegexp(skipped))
			for _, n := range names {
				text := "Kubernetes e2e suite " + n
				_, left := skipped[n]
				want := f.Selects(n) && !left
				if got := focus.MatchString(text) && !skip.MatchString(text); got != want {
					t.Errorf("focus %s, SCTP %v: %q runs %v, want %v", f, sctp, n, got, want)
				}
			}
		}
	}
}

func TestParseFocus(t *testing.T) {
	for in, want := range map[string]Focus{"": FocusAll, "all": FocusAll, "conformance": FocusConformance} {
		got, err := ParseFocus(in)
		if err != nil || got != want {
			t.Errorf("ParseFocus(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseFocus("Conformance"); err == nil {
		t.Error(`ParseFocus("Conformance"): no error`)
	}
}

func TestProtocolsHaveSCTP(t *testing.T) {
	// The head of /proc/net/protocols; the columns after the name do not
	// matter.
	const head = "protocol  size sockets  memory press maxhdr  slab module     cl co di ac io in de sh ss gs se re bi br ha uh gp em\n"
	tests := map[string]bool{
		head + "UDP        960      4       2   NI       0   yes  kernel      y  y  y  n  y  y  y  n  y  y  y  y  y  n  n  y  y  y  n\n" +
			"TCP       2240      9       1   no     320   yes  kernel      y  y  y  y  y  y  y  y  y  y  y  y  y  n  y  y  y  y  y\n": false,
		head + "SCTPv6    1296      0       0   no     320   yes  sctp        y  y  y  y  y  y  y  y  y  y  y  y  y  n  y  y  y  y  y\n" +
			"SCTP      1152      0       0   no     320   yes  sctp        y  y  y  y  y  y  y  y  y  y  y  y  y  n  y  y  y  y  y\n": true,
		"": false,
	}
	for in, want := range tests {
		if got := protocolsHaveSCTP(in); got != want {
			t.Errorf("protocolsHaveSCTP(%q) = %v, want %v", in, got, want)
		}
	}
}
