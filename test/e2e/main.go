package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proxykit/proxykit/test/e2e/build"
	"github.com/proxykit/proxykit/test/e2e/cluster"
	"github.com/proxykit/proxykit/test/e2e/images"
	"github.com/proxykit/proxykit/test/e2e/report"
	"github.com/proxykit/proxykit/test/e2e/suite"
)

// Exit codes: a spec failed or a run did not complete; the command line
// or the machine is wrong.
const (
	exitFailed = 1
	exitUsage  = 2
)

// teardownTimeout bounds stopping a proxy and removing a cluster after an
// interrupt.
const teardownTimeout = 5 * time.Minute

// options are the command line's.
type options struct {
	nodes      []int
	modes      []string // proxykit's
	kubeProxy  []string // kube-proxy's modes, the baseline
	focus      suite.Focus
	procs      int
	work       string
	results    string
	report     string
	keep       bool
	reportOnly bool
	reclaim    bool
	verbose    bool
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return exitUsage
	}
	if o.reportOnly {
		if err := report.Write(o.results, o.report); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return exitFailed
		}
		fmt.Printf("%s written from %s\n", o.report, o.results)
		return 0
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: needs root: it creates network and mount namespaces, cgroups and "+
			"tmpfs mounts, and runs containerd, kubelet and the proxies in them (the machine's own namespace is never touched).\n"+
			"Run it as root, e.g.: sudo env PATH=\"$PATH\" GOTOOLCHAIN=go1.27.3 go -C test/e2e run . "+strings.Join(args, " "))
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Closed before stop cancels ctx on the way out, so that only a signal
	// is reported as one.
	finished := make(chan struct{})
	defer close(finished)
	log := newLogger(os.Stderr)
	go func() {
		<-ctx.Done()
		select {
		case <-finished:
			return
		default:
		}
		// The next interrupt ends the program at once; the next run
		// reclaims what it leaves.
		stop()
		log.printf("interrupted: stopping the suite and tearing the cluster down (interrupt again to quit now; the next run reclaims what is left)")
	}()

	if o.reclaim {
		if err := cluster.Reclaim(ctx, log); err != nil {
			log.printf("reclaim: %v", err)
			return exitFailed
		}
		log.printf("nothing of an earlier run is left")
		return 0
	}
	return runAll(ctx, o, log)
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go -C test/e2e run . [flags]\n\n"+
			"Builds a real cluster of 1 to 3 nodes in namespaces, runs Kubernetes' e2e tests for service\n"+
			"proxies against kube-proxy and proxykit's node agent in each mode, and writes REPORT.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	nodes := fs.String("nodes", "1,2,3", "node counts to run, each 1 to 3, e.g. 1 or 1,2,3")
	modes := fs.String("modes", "iptables,nftables,userspace", "proxykit's modes to run (none: only kube-proxy)")
	kubeProxy := fs.String("kube-proxy", "iptables", "kube-proxy's modes to run as the baseline (none: skip it)")
	focus := fs.String("focus", "all", "the specs to run: all, or conformance (the [Conformance] ones, as CI runs)")
	var o options
	fs.IntVar(&o.procs, "procs", 4, "specs run in parallel (ginkgo processes)")
	fs.StringVar(&o.work, "work", filepath.Join(os.TempDir(), "proxykit-e2e"), "work directory: cluster configs and logs, ginkgo's reports (not under /run, /var/lib, /var/log)")
	fs.StringVar(&o.results, "results", "results", "directory of the stored runs, one JSON file each")
	fs.StringVar(&o.report, "report", "REPORT.md", "the report written from every stored run")
	fs.BoolVar(&o.keep, "keep", false, "leave the last cluster up, with its last proxy running, for debugging")
	fs.BoolVar(&o.reportOnly, "report-only", false, "only rewrite the report from the stored runs (no root needed)")
	fs.BoolVar(&o.reclaim, "reclaim", false, "only remove what a kept or killed run left")
	fs.BoolVar(&o.verbose, "v", false, "stream ginkgo's output (it is always in the run's ginkgo.log)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.nodes, err = parseNodes(*nodes); err != nil {
		return o, err
	}
	if o.modes, err = parseModes("-modes", *modes); err != nil {
		return o, err
	}
	if o.kubeProxy, err = parseModes("-kube-proxy", *kubeProxy); err != nil {
		return o, err
	}
	if o.focus, err = suite.ParseFocus(*focus); err != nil {
		return o, fmt.Errorf("-focus: %w", err)
	}
	if o.procs < 1 {
		return o, fmt.Errorf("-procs %d: want at least 1", o.procs)
	}
	if len(o.modes)+len(o.kubeProxy) == 0 && !o.reportOnly && !o.reclaim {
		return o, errors.New("-modes none and -kube-proxy none: nothing to run")
	}
	return o, nil
}

func parseNodes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > cluster.MaxNodes {
			return nil, fmt.Errorf("-nodes %q: want node counts from 1 to %d, comma-separated", s, cluster.MaxNodes)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func parseModes(flagName, s string) ([]string, error) {
	if s == "none" || s == "" {
		return nil, nil
	}
	var out []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		switch m {
		case "iptables", "nftables", "userspace", "ipvs":
		default:
			return nil, fmt.Errorf("%s %q: mode %q is not iptables, nftables, userspace or ipvs", flagName, s, m)
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// logger writes timestamped progress lines; it is the cluster's Log too.
type logger struct{ w io.Writer }

func newLogger(w io.Writer) *logger { return &logger{w: w} }

func (l *logger) printf(format string, args ...any) {
	fmt.Fprintf(l.w, "%s e2e: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (l *logger) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.printf("%s", line)
	}
	return len(p), nil
}

// runAll builds what is missing, then runs every proxy on every cluster
// size asked, saving each run and rewriting the report after it.
func runAll(ctx context.Context, o options, log *logger) int {
	buildLog := filepath.Join(o.work, "build.log")
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		log.printf("work directory: %v", err)
		return exitFailed
	}
	bl, err := os.Create(buildLog)
	if err != nil {
		log.printf("build log: %v", err)
		return exitFailed
	}
	defer bl.Close()
	log.printf("building what is missing (the first build takes about half an hour; log: %s)", buildLog)
	begin := time.Now()
	bins, err := build.Build(ctx, build.Options{Log: bl})
	if err != nil {
		log.printf("build: %v (see %s)", err, buildLog)
		return exitFailed
	}
	cache, err := build.DefaultCacheDir()
	if err != nil {
		log.printf("%v", err)
		return exitFailed
	}
	imgs, err := images.Build(ctx, filepath.Join(cache, "images"), bins)
	if err != nil {
		log.printf("images: %v", err)
		return exitFailed
	}
	log.printf("binaries and images ready in %s", time.Since(begin).Round(time.Second))

	m := machineOf(ctx)
	code := 0
	kinds := clusterKinds(o)
	for i, n := range o.nodes {
		for j, vm := range kinds {
			last := i == len(o.nodes)-1 && j == len(kinds)-1
			if c := runCluster(ctx, o, log, clusterRun{nodes: n, bins: bins, images: imgs, machine: m, keep: o.keep && last, vm: vm}); c > code {
				code = c
			}
			if ctx.Err() != nil {
				return exitFailed
			}
		}
	}
	return code
}

// machine is what a run records of where it ran.
type machine struct {
	commit, kernel string
	cores          int
}

func machineOf(ctx context.Context) machine {
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return machine{commit: gitCommit(ctx), kernel: strings.TrimSpace(string(release)), cores: runtime.NumCPU()}
}
