package proxykit

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestNoInformersLinked checks that a program using the root package with
// a source of its own (testdata/ownsource) links neither client-go's
// informers nor its cache: those come only with source/informer.
func TestNoInformersLinked(t *testing.T) {
	forbidden := []string{"k8s.io/client-go/informers", "k8s.io/client-go/tools/cache"}
	for _, pkg := range []string{".", "./testdata/ownsource"} {
		var bad []string
		for _, dep := range listDeps(t, pkg) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					bad = append(bad, dep)
				}
			}
		}
		if len(bad) > 0 {
			t.Errorf("go list -deps %s links %v", pkg, bad)
		}
	}
}

// backends are the dataplanes the library ships.
var backends = []string{"iptables", "nftables", "ipvs", "userspace"}

// TestBackendsStandAlone checks the layering DEVELOPERS.md states: no
// dataplane backend imports another, nor do its tests (what two share
// lives in a package of its own, such as dataplane/xtables; comparisons
// between dataplanes are bench/'s), and troubleshoot imports none (each
// backend exports its kernel reading and the caller wires it in).
func TestBackendsStandAlone(t *testing.T) {
	const module = "github.com/proxykit/proxykit/"
	check := func(pkg string, forbidden []string, flags ...string) {
		for _, dep := range listDeps(t, "./"+pkg, flags...) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s imports %s", pkg, dep)
				}
			}
		}
	}
	var all []string
	for _, b := range backends {
		all = append(all, module+"dataplane/"+b)
	}
	for _, b := range backends {
		var others []string
		for _, o := range backends {
			if o != b {
				others = append(others, module+"dataplane/"+o)
			}
		}
		check("dataplane/"+b, others, "-test")
	}
	check("troubleshoot", all)
}

// listDeps returns what go list -deps prints for pkg, given flags.
func listDeps(t *testing.T, pkg string, flags ...string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH; cannot list dependencies")
	}
	out, err := exec.Command("go", append(append([]string{"list", "-deps"}, flags...), pkg)...).Output()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	return strings.Fields(string(out))
}
