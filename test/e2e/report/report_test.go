package report

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxykit/proxykit/test/e2e/suite"
)

var update = flag.Bool("update", false, "rewrite testdata/REPORT.golden.md")

// testdata/results holds a fixed set of runs shaped after the one-node
// trial (its junit reports gave the names, verdicts and times): kube-proxy
// and proxykit iptables on one node (proxykit at the commit that failed
// the named targetPorts spec), a Conformance-only nftables run, and two
// small two-node runs with a userspace verdict its semantics explain and a
// suite failure.
func TestMarkdownGolden(t *testing.T) {
	runs, err := Load("testdata/results")
	if err != nil {
		t.Fatal(err)
	}
	got := Markdown(runs)
	const golden = "testdata/REPORT.golden.md"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("Markdown (-%s +got; go test -update rewrites it):\n%s", golden, diff)
	}
}

func TestMarkdownWithoutRuns(t *testing.T) {
	got := string(Markdown(nil))
	for _, want := range []string{"No runs are stored yet", "## Tests that cannot run here", "[Disruptive]"} {
		if !strings.Contains(got, want) {
			t.Errorf("Markdown(nil) lacks %q:\n%s", want, got)
		}
	}
}

func TestLoadOrder(t *testing.T) {
	runs, err := Load("testdata/results")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.FileName())
	}
	want := []string{
		"1node-kube-proxy-iptables.json",
		"1node-proxykit-iptables.json",
		"1node-proxykit-nftables.json",
		"2node-kube-proxy-iptables.json",
		"2node-proxykit-userspace.json",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load's order (-want +got):\n%s", diff)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := Run{
		Nodes:  3,
		Proxy:  "proxykit nftables",
		Commit: "3d5c785",
		Date:   time.Date(2026, 12, 8, 0, 30, 0, 0, time.UTC),
		Kernel: "6.18.44-fc-v1300",
		Cores:  2,
		Result: suite.Result{
			Duration: 31 * time.Minute,
			Focus:    suite.FocusAll,
			Specs: []suite.Spec{
				{Name: suite.GroupConntrack + " should be able to preserve UDP traffic when initial unready endpoints get ready", State: suite.StatePassed, Duration: 41 * time.Second},
				{Name: suite.GroupConntrack + " should be able to preserve UDP traffic when server pod cycles for a NodePort service", State: suite.StateSkipped,
					SkipReason: "Test requires >= 2 Ready nodes, but there are only 1 nodes"},
			},
		},
	}
	if err := Save(dir, r); err != nil {
		t.Fatal(err)
	}
	// A later run of the same proxy, mode and node count replaces it.
	r.Commit = "4e6f000"
	if err := Save(dir, r); err != nil {
		t.Fatal(err)
	}
	if err := Save(dir, Run{Nodes: 3, Proxy: "kube-proxy iptables", Result: r.Result}); err != nil {
		t.Fatal(err)
	}
	runs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Program() != ProgramKubeProxy {
		t.Fatalf("Load after three saves = %d runs, first %q; want kube-proxy's, then proxykit's", len(runs), runs[0].Proxy)
	}
	if diff := cmp.Diff(r, runs[1]); diff != "" {
		t.Errorf("run after Save and Load (-want +got):\n%s", diff)
	}
	b, err := os.ReadFile(filepath.Join(dir, "3node-proxykit-nftables.json"))
	if err != nil {
		t.Fatalf("stored under an unexpected name: %v", err)
	}
	if !strings.Contains(string(b), "requires >= 2") {
		t.Errorf("the stored run escapes its messages:\n%s", b)
	}
}

func TestSaveRefuses(t *testing.T) {
	for _, r := range []Run{
		{Nodes: 0, Proxy: "proxykit iptables"},
		{Nodes: 1, Proxy: "proxykit"},
		{Nodes: 1, Proxy: "proxykit ../iptables"},
	} {
		if err := Save(t.TempDir(), r); err == nil {
			t.Errorf("Save(%d nodes, %q): no error", r.Nodes, r.Proxy)
		}
	}
}

func TestLoadRefusesAMisnamedRun(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/results/2node-proxykit-userspace.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1node-proxykit-userspace.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "2node-proxykit-userspace.json") {
		t.Errorf("Load of a run stored under another run's name = %v", err)
	}
}

func TestWrite(t *testing.T) {
	out := filepath.Join(t.TempDir(), "REPORT.md")
	if err := Write("testdata/results", out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := Load("testdata/results")
	if string(got) != string(Markdown(runs)) {
		t.Error("Write wrote something else than Markdown of the stored runs")
	}
}

// TestExplanationsNameRealSpecs: an explanation must match a spec of the
// selection and a mode proxykit has.
func TestExplanationsNameRealSpecs(t *testing.T) {
	b, err := os.ReadFile("../suite/testdata/specs-v1.37.2.txt")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		names[n] = true
	}
	for _, e := range Explanations() {
		if !names[e.Spec] {
			t.Errorf("explanation for %q: no such spec", e.Spec)
		}
		switch e.Mode {
		case "iptables", "nftables", "userspace", "ipvs":
		default:
			t.Errorf("explanation for %q: mode %q", e.Spec, e.Mode)
		}
	}
}

func TestCell(t *testing.T) {
	tests := map[string]string{
		"plain":                             "plain",
		"a | b":                             `a \| b`,
		"Expected\n    <string>: 10.88.0.2": "Expected &lt;string>: 10.88.0.2",
	}
	for in, want := range tests {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
}
