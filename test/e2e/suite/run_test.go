package suite

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeGinkgo writes a shell script standing in for the ginkgo CLI: it
// records its arguments in args.txt of --output-dir, runs body, and
// copies testdata/report.json there as its JSON report.
func fakeGinkgo(t *testing.T, body string) (ginkgo string, opts Options) {
	t.Helper()
	dir := t.TempDir()
	report, err := filepath.Abs("testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
for a in "$@"; do case "$a" in --output-dir=*) dir="${a#--output-dir=}";; esac; done
printf '%s\n' "$@" > "$dir/args.txt"
report() { cp '` + report + `' "$dir/report.json"; }
` + body
	ginkgo = filepath.Join(dir, "ginkgo")
	if err := os.WriteFile(ginkgo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return ginkgo, Options{
		E2E:        "/opt/e2e/e2e.test",
		Ginkgo:     ginkgo,
		Kubectl:    "/opt/e2e/kubectl",
		Kubeconfig: "/run/e2e/admin.kubeconfig",
		Nodes:      3,
		ReportDir:  filepath.Join(dir, "run"),
		HasSCTP:    func() (bool, error) { return false, nil },
	}
}

func TestRunReadsTheReportOfAFailingSuite(t *testing.T) {
	_, opts := fakeGinkgo(t, "report\necho 'Ran 7 of 3206 Specs'\nexit 1\n")
	var commands []string
	opts.Command = func(ctx context.Context, name string, args ...string) *exec.Cmd {
		commands = append(commands, name)
		return exec.CommandContext(ctx, name, args...)
	}
	var console strings.Builder
	opts.Output = &console
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if p, f, s := res.Count(); p != 1 || f != 3 || s != 3 {
		t.Errorf("Run's Result counts %d passed, %d failed, %d skipped; want 1, 3, 3", p, f, s)
	}
	if diff := cmp.Diff([]string{opts.Ginkgo}, commands); diff != "" {
		t.Errorf("Command calls (-want +got):\n%s", diff)
	}
	logged, err := os.ReadFile(filepath.Join(opts.ReportDir, ConsoleLog))
	if err != nil || string(logged) != "Ran 7 of 3206 Specs\n" || console.String() != string(logged) {
		t.Errorf("ginkgo's output: log %q (%v), Output %q", logged, err, console.String())
	}

	b, err := os.ReadFile(filepath.Join(opts.ReportDir, "args.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--procs=4",
		"--timeout=3h0m0s",
		`--focus=(?:\[sig-network\] Services|\[sig-network\] Networking Granular Checks: Services|\[sig-network\] Conntrack|\[sig-network\] KubeProxy) `,
		`--skip=(?:\[sig-network\] Networking Granular Checks: Services should function for endpoint-Service: sctp \[Feature:SCTPConnectivity\]` +
			`|\[sig-network\] Networking Granular Checks: Services should function for node-Service: sctp \[Feature:SCTPConnectivity\]` +
			`|\[sig-network\] Networking Granular Checks: Services should function for pod-Service: sctp \[Feature:SCTPConnectivity\]` +
			`|\[sig-network\] Services should allow creating a basic SCTP service with pod and endpoints \[LinuxOnly\] \[Serial\]` +
			`|\[sig-network\] Services should work after restarting apiserver \[Disruptive\]` +
			`|\[sig-network\] Services should work after restarting kube-proxy \[Disruptive\])$`,
		"--no-color",
		"--silence-skips",
		"--poll-progress-after=10m",
		"--poll-progress-interval=5m",
		"--output-dir=" + opts.ReportDir,
		"--json-report=report.json",
		"--junit-report=junit.xml",
		"/opt/e2e/e2e.test",
		"--",
		"--provider=local",
		"--kubeconfig=/run/e2e/admin.kubeconfig",
		"--kubectl-path=/opt/e2e/kubectl",
		"--num-nodes=3",
		"--report-dir=" + opts.ReportDir,
		"--disable-log-dump",
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(string(b)), "\n")); diff != "" {
		t.Errorf("ginkgo's arguments (-want +got):\n%s", diff)
	}
}

func TestRunWithoutAReport(t *testing.T) {
	_, opts := fakeGinkgo(t, "echo 'Failed to compile'\nexit 1\n")
	// A report an earlier run left must not pass for this run's.
	if err := os.MkdirAll(opts.ReportDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(opts.ReportDir, ReportJSON), []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), ConsoleLog) {
		t.Errorf("Run = %v, want an error pointing at %s", err, ConsoleLog)
	}
}

// TestRunInterrupted: when the context ends, ginkgo gets one SIGINT, and
// the report it writes then is read.
func TestRunInterrupted(t *testing.T) {
	_, opts := fakeGinkgo(t, `trap 'report; exit 1' INT
echo started
i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
`)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	opts.Output = writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), "started") {
			close(started)
		}
		return len(p), nil
	})
	go func() {
		<-started
		cancel()
	}()
	begin := time.Now()
	res, err := Run(ctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if len(res.Specs) != 7 {
		t.Errorf("Run after an interrupt kept %d specs, want the report's 7", len(res.Specs))
	}
	if d := time.Since(begin); d > 20*time.Second {
		t.Errorf("the interrupted fake ginkgo ran %v: it never got SIGINT", d)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestOptionsChecked(t *testing.T) {
	_, opts := fakeGinkgo(t, "exit 0\n")
	bad := []func(*Options){
		func(o *Options) { o.E2E = "/opt/e2e/e2e" },
		func(o *Options) { o.Kubeconfig = "" },
		func(o *Options) { o.Nodes = 0 },
		func(o *Options) { o.Focus = "serial" },
		func(o *Options) { o.Procs = -1 },
	}
	for i, change := range bad {
		o := opts
		change(&o)
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "suite options") {
			t.Errorf("case %d: Run = %v, want an options error", i, err)
		}
	}
}
