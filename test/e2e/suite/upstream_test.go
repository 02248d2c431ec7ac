package suite

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// upstreamBinaries returns the e2e.test and ginkgo CLI named by
// PROXYKIT_E2E_TEST and PROXYKIT_E2E_GINKGO (package build makes both),
// or skips: these tests need the real suite, which takes half an hour to
// build.
func upstreamBinaries(t *testing.T) (e2e, ginkgo string) {
	t.Helper()
	e2e, ginkgo = os.Getenv("PROXYKIT_E2E_TEST"), os.Getenv("PROXYKIT_E2E_GINKGO")
	if e2e == "" || ginkgo == "" {
		t.Skip("PROXYKIT_E2E_TEST and PROXYKIT_E2E_GINKGO name no e2e.test and ginkgo CLI")
	}
	return e2e, ginkgo
}

// TestSpecListIsUpstreams holds testdata/specs-v1.37.2.txt, which the
// selection's tests read, to the suite binary's own list.
func TestSpecListIsUpstreams(t *testing.T) {
	e2e, _ := upstreamBinaries(t)
	out, err := exec.CommandContext(context.Background(), e2e, "--list-tests").Output()
	if err != nil {
		t.Fatalf("%s --list-tests: %v", e2e, err)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		// "    k8s.io/kubernetes@v1.37.2/test/e2e/network/service.go:733: [sig-network] Services ..."
		if _, name, ok := strings.Cut(strings.TrimSpace(line), ": "); ok && GroupOf(name) != "" {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff(specNames(t), got); diff != "" {
		t.Errorf("the groups' specs (-testdata +%s):\n%s", filepath.Base(e2e), diff)
	}
}

// TestRunRealSuiteWithoutACluster runs the real ginkgo CLI and e2e.test,
// in parallel, against an API server that refuses connections: the suite
// fails in its SynchronizedBeforeSuite (after about a minute of retries),
// which Run must report as a Result with a suite failure, not an error.
func TestRunRealSuiteWithoutACluster(t *testing.T) {
	e2e, ginkgo := upstreamBinaries(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	const refused = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(kubeconfig, []byte(refused), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to stand in for kubectl")
	}
	res, err := Run(context.Background(), Options{
		E2E: e2e, Ginkgo: ginkgo, Kubectl: kubectl, Kubeconfig: kubeconfig,
		ReportDir: filepath.Join(dir, "run"), Nodes: 1, Focus: FocusConformance, Procs: 2,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(res.Specs) != 0 || len(res.SuiteFailures) == 0 || !strings.Contains(strings.Join(res.SuiteFailures, "\n"), "connection refused") {
		t.Errorf("Run without an API server = %d specs, suite failures %q; want none, and the refused connection", len(res.Specs), res.SuiteFailures)
	}
}
