package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/proxykit/proxykit/test/e2e/build"
	"github.com/proxykit/proxykit/test/e2e/cluster"
	"github.com/proxykit/proxykit/test/e2e/report"
	"github.com/proxykit/proxykit/test/e2e/suite"
)

// clusterRun is one cluster size and what runs on it.
type clusterRun struct {
	nodes   int
	bins    build.Binaries
	images  []string
	machine machine
	keep    bool // leave the cluster, and its last proxy, up
	vm      bool // worker nodes are VMs, for the modes in needsVM
}

// proxies lists the proxies to run, kube-proxy's modes first (the
// baseline), then proxykit's.
func proxies(o options, bins build.Binaries) []cluster.Proxy {
	var ps []cluster.Proxy
	for _, m := range o.kubeProxy {
		ps = append(ps, cluster.Proxy{Name: report.ProgramKubeProxy, Binary: bins.KubeProxy, Mode: m})
	}
	for _, m := range o.modes {
		ps = append(ps, cluster.Proxy{Name: report.ProgramProxykit, Binary: bins.Agent, Mode: m})
	}
	return ps
}

// runCluster brings up a cluster of r.nodes, runs every proxy on it and
// tears it down (unless r.keep); it returns the exit code its runs earn.
func runCluster(ctx context.Context, o options, log *logger, r clusterRun) int {
	workDir := filepath.Join(o.work, fmt.Sprintf("%dnode", r.nodes))
	cfg := cluster.Config{Nodes: r.nodes, Bin: r.bins, Images: r.images, WorkDir: workDir, Log: log}
	if r.vm {
		workDir += "-vm"
		cfg.Nodes, cfg.VM, cfg.WorkDir = 1, &cluster.VM{Nodes: r.nodes}, workDir
	}
	log.printf("bringing up %d node(s) (logs: %s)", r.nodes, workDir)
	begin := time.Now()
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		log.printf("cluster of %d node(s): %v", r.nodes, err)
		return exitFailed
	}
	log.printf("cluster of %d node(s) up in %s", r.nodes, time.Since(begin).Round(time.Second))
	keep := r.keep
	defer func() {
		if keep && ctx.Err() == nil {
			printKept(ctx, c, workDir)
			return
		}
		down, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
		defer cancel()
		if err := c.Down(down); err != nil {
			log.printf("tearing down %d node(s): %v (the next run reclaims what is left)", r.nodes, err)
		}
	}()

	code := 0
	ps := proxiesOn(proxies(o, r.bins), r.vm)
	for i, p := range ps {
		last := i == len(ps)-1
		if rc := runProxy(ctx, o, log, c, r, p, r.keep && last); rc > code {
			code = rc
		}
		if ctx.Err() != nil {
			return exitFailed
		}
	}
	return code
}

// runProxy runs the suite against p on c and stores the run; the proxy
// keeps running when keep is set.
func runProxy(ctx context.Context, o options, log *logger, c *cluster.Cluster, r clusterRun, p cluster.Proxy, keep bool) int {
	run := report.Run{Nodes: r.nodes, Proxy: p.Name + " " + p.Mode, Commit: r.machine.commit, Kernel: r.machine.kernel, Cores: r.machine.cores}
	if k := c.VMKernelRelease(); k != "" {
		run.Kernel = k + " (qemu TCG VMs)"
	}
	defer func() {
		if keep && ctx.Err() == nil {
			return
		}
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
		defer cancel()
		if err := c.StopProxy(stop); err != nil {
			log.printf("stopping %s: %v", run.Proxy, err)
		}
	}()
	log.printf("%d node(s), %s: starting the proxy", r.nodes, run.Proxy)
	if err := c.StartProxy(ctx, p); err != nil {
		log.printf("%d node(s), %s: %v", r.nodes, run.Proxy, err)
		return exitFailed
	}
	reportDir := filepath.Join(o.work, "runs", strings.TrimSuffix(run.FileName(), ".json"))
	procs := o.procs
	if r.vm && procs > vmProcs {
		// Pods start in minutes on TCG VMs when several specs make them at
		// once: the specs' own timeouts fail, not the proxy.
		log.printf("%d node(s), %s: VM nodes run %d spec(s) at a time, not %d", r.nodes, run.Proxy, vmProcs, procs)
		procs = vmProcs
	}
	var out io.Writer
	if o.verbose {
		out = os.Stdout
	}
	log.printf("%d node(s), %s: running the suite (%s, %d processes; output: %s)",
		r.nodes, run.Proxy, o.focus, procs, filepath.Join(reportDir, suite.ConsoleLog))
	run.Date = time.Now().UTC().Truncate(time.Second)
	res, err := suite.Run(ctx, suite.Options{
		E2E: r.bins.E2E, Ginkgo: r.bins.Ginkgo, Kubectl: r.bins.Kubectl,
		// The schedulable nodes: r.nodes namespaces, or r.nodes VMs beside a
		// tainted control-plane node.
		Kubeconfig: c.Kubeconfig(), Nodes: r.nodes, ReportDir: reportDir,
		Focus: o.focus, Procs: procs,
		// An interrupted run is neither stored nor kept: its namespaces go
		// with the cluster, so the specs need no long cleanup.
		Grace:   20 * time.Second,
		Command: c.Command, Output: out,
	})
	if err != nil {
		// An interrupted or broken run is not stored: its column would
		// claim verdicts the suite never reached.
		log.printf("%d node(s), %s: %v", r.nodes, run.Proxy, err)
		return exitFailed
	}
	run.Result = res
	passed, failed, skipped := res.Count()
	log.printf("%d node(s), %s: %d passed, %d failed, %d skipped in %s",
		r.nodes, run.Proxy, passed, failed, skipped, res.Duration.Round(time.Second))
	for _, s := range res.Specs {
		if s.Failed() {
			log.printf("  %s %s: %s", s.State, s.Name, firstLine(s.Failure))
		}
	}
	if err := report.Save(o.results, run); err != nil {
		log.printf("%v", err)
		return exitFailed
	}
	if err := report.Write(o.results, o.report); err != nil {
		log.printf("%v", err)
		return exitFailed
	}
	if failed > 0 || len(res.SuiteFailures) > 0 {
		return exitFailed
	}
	return 0
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// printKept says how to reach a cluster -keep left up.
func printKept(ctx context.Context, c *cluster.Cluster, workDir string) {
	enter := "(see cluster.Cluster.Command)"
	// Command's argv ends with the nsenter line that enters the runner
	// namespace; a shell there is the way in.
	if args := c.Command(ctx, "bash").Args; slices.Contains(args, "nsenter") {
		enter = strings.Join(args[slices.Index(args, "nsenter"):], " ")
	}
	fmt.Printf(`
The cluster of %d node(s) is still up (-keep), with the last proxy running.
  shell where the suite ran (the runner namespace): %s
  then: export KUBECONFIG=%s; kubectl get nodes -o wide
  configs and every process's log: %s
  tear it down: go -C test/e2e run . -reclaim
`, c.Nodes(), enter, c.Kubeconfig(), workDir)
}

// gitCommit names the checkout the agent is built from, "-dirty" when it
// has uncommitted changes, "unknown" without git.
func gitCommit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "-C", build.ModuleDir(), "rev-parse", "--short=7", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	status, err := exec.CommandContext(ctx, "git", "-C", build.ModuleDir(), "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(strings.TrimSpace(string(status))) > 0 {
		commit += "-dirty"
	}
	return commit
}
