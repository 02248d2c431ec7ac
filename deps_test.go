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
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go tool is not on PATH; cannot list dependencies")
	}
	forbidden := []string{"k8s.io/client-go/informers", "k8s.io/client-go/tools/cache"}
	for _, pkg := range []string{".", "./testdata/ownsource"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			var stderr string
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
		}
		var bad []string
		for _, dep := range strings.Fields(string(out)) {
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
