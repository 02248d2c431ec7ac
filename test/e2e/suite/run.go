package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options says what to run against which cluster.
type Options struct {
	// E2E is the precompiled upstream suite; its name must end in ".test",
	// or the ginkgo CLI will not run it. Ginkgo is the ginkgo CLI of the
	// version E2E links (v2.32.0), Kubectl the kubectl the suite calls.
	E2E, Ginkgo, Kubectl string
	// Kubeconfig is an admin kubeconfig valid where Command runs.
	Kubeconfig string
	// Nodes is how many schedulable nodes the cluster has, passed as
	// --num-nodes: the suite counts them itself only on its first process,
	// and the specs that call SkipUnlessNodeCountIsAtLeast on the others
	// would skip ("Requires at least 2 nodes (not -1)"). Required.
	Nodes int
	// ReportDir receives ginkgo's JSON and JUnit reports, the suite's own
	// junit_01.xml and ginkgo's console output (ginkgo.log); it is created.
	ReportDir string

	Focus Focus // zero: FocusAll
	Procs int   // parallel ginkgo processes; zero: 4 (the specs mostly wait)
	// Timeout bounds the whole suite (ginkgo's --timeout); zero: 3h.
	Timeout time.Duration
	// Grace is how long an interrupted suite gets to clean up its
	// namespaces before its processes are killed; zero: 2m.
	Grace time.Duration
	// HasSCTP says whether the cluster's kernel has SCTP; zero:
	// KernelHasSCTP (the nodes share this machine's kernel).
	HasSCTP func() (bool, error)

	// Command builds the command that runs ginkgo, e.g. in the namespace
	// from which the cluster is reachable (cluster.Cluster.Command); zero:
	// exec.CommandContext on this machine. Run cancels ginkgo itself (an
	// interrupt, then a kill after Grace), so the context it passes never
	// ends.
	Command func(ctx context.Context, name string, args ...string) *exec.Cmd
	// Output receives ginkgo's console output as it runs, besides
	// ginkgo.log (zero: ginkgo.log only).
	Output io.Writer
}

// Files Run writes in ReportDir.
const (
	ReportJSON  = "report.json"
	ReportJUnit = "junit.xml"
	ConsoleLog  = "ginkgo.log"
)

// Run runs the selection with the ginkgo CLI, Procs processes in parallel
// ([Serial] specs last, on one process, as ginkgo does), and reads its
// report. A spec failing is a Result, not an error; an error means the
// suite did not run or left no report. When ctx ends, ginkgo is
// interrupted as a terminal would (so specs clean up their namespaces) and
// what its report holds is returned with ctx's error.
func Run(ctx context.Context, opts Options) (Result, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Result{}, err
	}
	sctp, err := opts.HasSCTP()
	if err != nil {
		return Result{}, fmt.Errorf("checking the kernel for SCTP: %w", err)
	}
	skipped := Skipped(sctp)
	if err := os.MkdirAll(opts.ReportDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("report directory: %w", err)
	}
	// A report left by an earlier run must not pass for this one's.
	for _, f := range []string{ReportJSON, ReportJUnit, "junit_01.xml"} {
		if err := os.Remove(filepath.Join(opts.ReportDir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return Result{}, fmt.Errorf("removing the last report: %w", err)
		}
	}
	logFile, err := os.Create(filepath.Join(opts.ReportDir, ConsoleLog))
	if err != nil {
		return Result{}, fmt.Errorf("ginkgo's log: %w", err)
	}
	defer logFile.Close()

	args := Args(opts, skipped)
	cmd := opts.Command(context.WithoutCancel(ctx), opts.Ginkgo, args...)
	var out io.Writer = logFile
	if opts.Output != nil {
		out = io.MultiWriter(logFile, opts.Output)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// A suite process that outlives ginkgo must not hold Run on the pipe.
	cmd.WaitDelay = 10 * time.Second
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("starting ginkgo: %w", err)
	}
	waitErr := waitInterruptible(ctx, cmd, opts.Grace)

	res, err := ReadReport(filepath.Join(opts.ReportDir, ReportJSON), opts.Focus, skipped)
	if ctx.Err() != nil {
		return res, fmt.Errorf("suite interrupted: %w", ctx.Err())
	}
	if err != nil {
		exit := "ginkgo exited 0"
		if waitErr != nil {
			exit = "ginkgo: " + waitErr.Error()
		}
		return res, fmt.Errorf("%w (%s; its output is in %s)", err, exit, logFile.Name())
	}
	return res, nil
}

func (o Options) withDefaults() (Options, error) {
	for _, f := range []struct{ name, v string }{
		{"E2E", o.E2E}, {"Ginkgo", o.Ginkgo}, {"Kubectl", o.Kubectl}, {"Kubeconfig", o.Kubeconfig}, {"ReportDir", o.ReportDir},
	} {
		if f.v == "" {
			return o, fmt.Errorf("suite options: %s is empty", f.name)
		}
	}
	if o.Nodes < 1 {
		return o, fmt.Errorf("suite options: Nodes %d: the suite needs the cluster's node count", o.Nodes)
	}
	if !strings.HasSuffix(o.E2E, ".test") {
		return o, fmt.Errorf("suite options: E2E %s: the ginkgo CLI runs a precompiled suite only when its name ends in .test", o.E2E)
	}
	if o.Focus == "" {
		o.Focus = FocusAll
	}
	if _, err := ParseFocus(string(o.Focus)); err != nil {
		return o, fmt.Errorf("suite options: %w", err)
	}
	if o.Procs == 0 {
		o.Procs = 4
	}
	if o.Procs < 0 {
		return o, fmt.Errorf("suite options: Procs %d", o.Procs)
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Hour
	}
	if o.Grace == 0 {
		o.Grace = 2 * time.Minute
	}
	if o.HasSCTP == nil {
		o.HasSCTP = KernelHasSCTP
	}
	if o.Command == nil {
		o.Command = exec.CommandContext
	}
	return o, nil
}

// Args returns the ginkgo command line Run uses (after the ginkgo
// program), the way k8s' hack/ginkgo-e2e.sh runs a precompiled e2e.test:
// the CLI's own flags, the binary, then "--" and the suite's flags.
func Args(opts Options, skipped map[string]string) []string {
	args := []string{
		"--procs=" + strconv.Itoa(opts.Procs),
		"--timeout=" + opts.Timeout.String(),
		"--focus=" + opts.Focus.Regexp(),
	}
	if skip := SkipRegexp(skipped); skip != "" {
		args = append(args, "--skip="+skip)
	}
	args = append(args,
		"--no-color",
		"--silence-skips",
		"--poll-progress-after=10m",
		"--poll-progress-interval=5m",
		"--output-dir="+opts.ReportDir,
		"--json-report="+ReportJSON,
		"--junit-report="+ReportJUnit,
		opts.E2E,
		"--",
		"--provider=local",
		"--kubeconfig="+opts.Kubeconfig,
		"--kubectl-path="+opts.Kubectl,
		"--num-nodes="+strconv.Itoa(opts.Nodes),
		"--report-dir="+opts.ReportDir,
		// Log dumps ssh to the nodes; the fixture keeps every log itself.
		"--disable-log-dump",
	)
	return args
}

// ownProcessGroup puts ginkgo and the suite processes it starts in a
// process group of their own, so that one interrupt reaches them all once
// (a terminal's ^C reaches this program alone).
func ownProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if !cmd.SysProcAttr.Setsid {
		cmd.SysProcAttr.Setpgid = true
	}
}

// waitInterruptible waits for cmd; when ctx ends first it interrupts the
// process group, and kills it when grace has passed too.
func waitInterruptible(ctx context.Context, cmd *exec.Cmd, grace time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGINT)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-done
	}
}
