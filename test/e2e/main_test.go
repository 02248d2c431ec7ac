package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxykit/proxykit/test/e2e/suite"
)

func TestParseFlags(t *testing.T) {
	defaults := options{
		nodes: []int{1, 2, 3}, modes: []string{"iptables", "nftables", "userspace"}, kubeProxy: []string{"iptables"},
		focus: suite.FocusAll, procs: 4, work: "/tmp/proxykit-e2e", results: "results", report: "REPORT.md",
	}
	tests := []struct {
		args []string
		want func(*options)
	}{
		{nil, func(*options) {}},
		{[]string{"-nodes", "2,1,2", "-modes", "nftables", "-kube-proxy", "none", "-focus", "conformance", "-procs", "2", "-keep"},
			func(o *options) {
				o.nodes, o.modes, o.kubeProxy, o.focus, o.procs, o.keep = []int{2, 1}, []string{"nftables"}, nil, suite.FocusConformance, 2, true
			}},
		{[]string{"-report-only", "-results", "/tmp/r"}, func(o *options) { o.reportOnly, o.results = true, "/tmp/r" }},
	}
	for _, tt := range tests {
		want := defaults
		tt.want(&want)
		t.Setenv("TMPDIR", "/tmp")
		got, err := parseFlags(tt.args)
		if err != nil {
			t.Errorf("parseFlags(%q): %v", tt.args, err)
			continue
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(options{})); diff != "" {
			t.Errorf("parseFlags(%q) (-want +got):\n%s", tt.args, diff)
		}
	}
}

func TestParseFlagsRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"-nodes", "0"}, {"-nodes", "4"}, {"-nodes", "1,x"},
		{"-modes", "ipvs,kernelspace"}, {"-kube-proxy", "userspace2"},
		{"-focus", "serial"}, {"-procs", "0"},
		{"-modes", "none", "-kube-proxy", "none"},
		{"extra"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}
