package suite

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testdata/report.json is a ginkgo v2.32.0 JSON report of the e2e suite
// (a dry run's, trimmed to a few specs, their verdicts set from the
// one-node trial's): suite nodes, a pass, failures in the body and in an
// AfterEach, a skip by the spec itself, one left out by --skip, a spec
// of another block, a suite timeout and a failing report node.
func TestReadReport(t *testing.T) {
	got, err := ReadReport("testdata/report.json", FocusAll, Skipped(false))
	if err != nil {
		t.Fatal(err)
	}
	want := Result{
		Duration: 3612500 * time.Millisecond,
		Focus:    FocusAll,
		Seed:     1796686230,
		SuiteFailures: []string{
			"Suite Timeout Elapsed",
			"[ReportAfterSuite] open /tmp/proxykit-e2e/runs/1node-proxykit-iptables/junit_01.xml: no space left on device (test/e2e/e2e_test.go:157)",
		},
		Specs: []Spec{
			{
				Name:       "[sig-network] Conntrack should be able to preserve UDP traffic when server pod cycles for a NodePort service",
				State:      "skipped",
				Duration:   100 * time.Millisecond,
				SkipReason: "Test requires >= 2 Ready nodes, but there are only 1 nodes",
			},
			{
				Name:     "[sig-network] Networking Granular Checks: Services should update endpoints: http",
				State:    "failed",
				Duration: 131500 * time.Millisecond,
				Failure: "Timed out after 120.001s.\nExpected\n    <[]string | len:2, cap:2>: [\n" +
					"        \"netserver-0\",\n        \"netserver-1\",\n    ]\n…",
				Location: "in [AfterEach] at test/e2e/framework/network/utils.go:431",
			},
			{
				Name:     "[sig-network] Services should have session affinity timeout work for NodePort service [LinuxOnly]",
				State:    "timedout",
				Duration: time.Hour,
				Failure:  "A suite timeout occurred",
				Location: "test/e2e/network/service.go:2272",
			},
			{
				Name:     "[sig-network] Services should serve a basic endpoint from pods [Conformance]",
				State:    "passed",
				Duration: 12812 * time.Millisecond,
			},
			{
				Name:       "[sig-network] Services should support externalTrafficPolicy=Local for type=NodePort",
				State:      "skipped",
				Duration:   97 * time.Millisecond,
				SkipReason: "Requires at least 2 nodes (not 1)",
			},
			{
				Name:     "[sig-network] Services should support named targetPorts that resolve to different ports on different endpoints",
				State:    "failed",
				Duration: 126782 * time.Millisecond,
				Failure:  "service is not reachable within 2m0s timeout on endpoint mutable-named-port:8001 over TCP protocol",
				Location: "test/e2e/network/service.go:4168",
			},
			{
				Name:       "[sig-network] Services should work after restarting kube-proxy [Disruptive]",
				State:      "skipped",
				SkipReason: whyRestartProxy,
			},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadReport (-want +got):\n%s", diff)
	}
	p, f, s := got.Count()
	if p != 1 || f != 3 || s != 3 {
		t.Errorf("Count() = %d, %d, %d; want 1, 3, 3", p, f, s)
	}

	conf, err := ReadReport("testdata/report.json", FocusConformance, Skipped(false))
	if err != nil {
		t.Fatal(err)
	}
	if len(conf.Specs) != 1 || conf.Specs[0].State != StatePassed {
		t.Errorf("ReadReport with FocusConformance kept %+v, want the one [Conformance] spec", conf.Specs)
	}
}

func TestReadReportErrors(t *testing.T) {
	for _, path := range []string{"testdata/missing.json", "testdata/specs-v1.37.2.txt"} {
		if _, err := ReadReport(path, FocusAll, nil); err == nil || !strings.Contains(err.Error(), "report") {
			t.Errorf("ReadReport(%s) = %v, want an error naming the report", path, err)
		}
	}
}

func TestFirstLines(t *testing.T) {
	long := strings.Repeat("é", maxFailureChars)
	tests := map[string]string{
		"one line":                 "one line",
		"\n  first\n\n second  \n": "  first\n second",
		"1\n2\n3\n4\n5\n6\n7\n8":   "1\n2\n3\n4\n5\n6\n…",
		"\x1b[1m\x1b[38;5;9mSynchronizedBeforeSuite failed on Ginkgo parallel process #1\x1b[0m\n  The first": "SynchronizedBeforeSuite failed on Ginkgo parallel process #1\n  The first",
		long:                         long[:maxFailureChars] + "…",
		"x" + long[:maxFailureChars]: "x" + long[:maxFailureChars-2] + "…",
	}
	for in, want := range tests {
		if got := firstLines(in); got != want {
			t.Errorf("firstLines(%.40q) = %.40q…, want %.40q…", in, got, want)
		}
	}
}
