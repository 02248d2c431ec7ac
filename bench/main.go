package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	var (
		out     = flag.String("out", "", "write the Markdown table to this file as well as to stdout")
		quick   = flag.Bool("quick", false, "only the 1k and 10k × 10 workloads")
		runs    = flag.Int("runs", 5, "child processes per system and workload (first syncs, peak RSS and kernel runs are one per process)")
		reps    = flag.Int("reps", 3, "repetitions of each later operation per child process")
		wlList  = flag.String("workloads", "", "comma-separated workload names to run (1k, 5k, 10k, 50k, 100k, 10k-mix, 10k-dual; default all of the set)")
		sysList = flag.String("systems", "", "comma-separated systems to run (default all): "+systemKeys())
		kernels = flag.String("kernels", iptablesLegacy+","+nftables, "comma-separated real backends to measure first syncs and one-endpoint changes on (the 1k, 10k and 100k × 10 ClusterIP workloads), in a namespace the benchmark creates: "+strings.Join([]string{iptablesLegacy, iptablesNFT, nftables}, ", ")+"; empty for none")
		kernSys = flag.String("kernel-systems", "", "comma-separated systems whose kernel rows run (default all that run): kube-proxy's nftables first sync at 100k takes many minutes through nft")
		check   = flag.Bool("check", true, "cross-check the verdicts of kube-proxy's and proxykit's iptables rules (workloads of at most 100k endpoints)")
		profile = flag.String("profile", "", "write a CPU profile of every child process into this directory")
		warmup  = flag.Int("kernel-warmup", 3, "one-endpoint changes made unmeasured after a kernel row's first sync, before its measured ones: the first changes after a cold load pay for the load's deferred kernel work and cold caches")
		nftText = flag.Bool("nft-text", false, "run proxykit nftables' compute rows through its nft text path (a discarding knftables.Interface), which its default netlink path never runs, instead of encoding netlink messages")
		child   = flag.String("child", "", "internal: run one measurement (JSON childArgs) and print its result")
	)
	flag.Parse()
	if *child != "" {
		var a childArgs
		if err := json.Unmarshal([]byte(*child), &a); err != nil {
			fatal(err)
		}
		res, err := runChild(a)
		if err != nil {
			fatal(err)
		}
		if err := writeChildResult(res); err != nil {
			fatal(err)
		}
		return
	}
	cfg := runConfig{runs: *runs, reps: *reps, workloads: defaultWorkloads}
	if *quick {
		cfg.workloads = quickWorkloads
	}
	if names := splitList(*wlList); names != nil {
		cfg.workloads = slices.DeleteFunc(cfg.workloads, func(w workload) bool { return !slices.Contains(names, w.Name) })
	}
	for _, k := range splitList(*sysList) {
		if _, err := lookupSystem(k); err != nil {
			fatal(err)
		}
		cfg.systems = append(cfg.systems, k)
	}
	cfg.kernels = splitList(*kernels)
	for _, k := range splitList(*kernSys) {
		if _, err := lookupSystem(k); err != nil {
			fatal(err)
		}
		cfg.kernelSystems = append(cfg.kernelSystems, k)
	}
	cfg.profileDir = *profile
	cfg.nftText = *nftText
	cfg.kernelWarmup = max(*warmup, 0)
	cfg.check = *check
	rep, err := run(context.Background(), cfg)
	if err != nil {
		fatal(err)
	}
	var buf bytes.Buffer
	rep.write(&buf)
	os.Stdout.Write(buf.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func systemKeys() string {
	var keys []string
	for _, s := range systems {
		keys = append(keys, s.key)
	}
	return strings.Join(keys, ", ")
}

// maxCheckEndpoints bounds the workloads cross-checked: reading a million
// endpoints' rules back into the tracer takes minutes.
const maxCheckEndpoints = 100000

type runConfig struct {
	runs, reps int
	workloads  []workload
	// systems are the keys to run; nil means all.
	systems []string
	kernels []string
	// kernelSystems are the keys whose kernel rows run; nil means all.
	kernelSystems []string
	// profileDir, if set, receives a CPU profile per child process.
	profileDir string
	check      bool
	// kernelWarmup is how many one-endpoint changes each kernel row makes
	// unmeasured before its measured ones.
	kernelWarmup int
	// nftText runs proxykit nftables' compute rows on its text path.
	nftText bool
}

func (c runConfig) wants(key string) bool {
	if c.systems == nil {
		return true
	}
	for _, k := range c.systems {
		if k == key {
			return true
		}
	}
	return false
}

// run measures every workload on every system, interleaving the systems'
// child processes so that a slow spell of a shared machine falls on all
// of them alike.
func run(ctx context.Context, cfg runConfig) (*report, error) {
	rep := &report{machine: describeMachine(), cfg: cfg, results: map[resultKey]*result{}}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "proxykit-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, w := range cfg.workloads {
		start := time.Now()
		if cfg.check && cfg.wants("kube-iptables") && cfg.wants("proxykit-iptables") && w.Services*w.Endpoints <= maxCheckEndpoints {
			fmt.Fprintf(os.Stderr, "\r%-14s cross-check%30s", w, "")
			res, err := runChildProcess(ctx, self, childArgs{Check: true, Workload: w}, nil)
			if err != nil {
				return nil, fmt.Errorf("%s, cross-check: %w", w, err)
			}
			rep.checks = append(rep.checks, workloadCheck{w, res.Check})
		}
		// The objects' own footprint hardly varies: one process says it.
		res, err := runChildProcess(ctx, self, childArgs{System: baseline, Workload: w}, nil)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", w, baseline, err)
		}
		rep.add(w, baseline, discard, res)
		reps := cfg.reps
		if w.Reps > 0 {
			reps = min(reps, w.Reps)
		}
		for r := range cfg.runs {
			for _, spec := range systems {
				if spec.new == nil || !cfg.wants(spec.key) {
					continue
				}
				fmt.Fprintf(os.Stderr, "\r%-14s run %d/%d: %-18s", w, r+1, cfg.runs, spec.key)
				a := childArgs{System: spec.key, Backend: discard, Workload: w, Reps: reps, NFTText: cfg.nftText}
				if cfg.profileDir != "" {
					a.CPUProfile = filepath.Join(cfg.profileDir, fmt.Sprintf("%s-%s-%d.pprof", spec.key, strings.NewReplacer(" ", "", "×", "x").Replace(w.String()), r))
				}
				res, err := runChildProcess(ctx, self, a, nil)
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", w, spec.key, err)
				}
				rep.add(w, spec.key, discard, res)
				for _, k := range cfg.kernels {
					if !slices.Contains(spec.kernels, k) || !w.Kernel || (cfg.kernelSystems != nil && !slices.Contains(cfg.kernelSystems, spec.key)) {
						continue
					}
					fmt.Fprintf(os.Stderr, "\r%-14s run %d/%d: %-18s on %s", w, r+1, cfg.runs, spec.key, k)
					if err := runKernel(ctx, self, tmp, spec.key, k, w, reps, cfg.kernelWarmup, rep); err != nil {
						return nil, fmt.Errorf("%s, %s on %s: %w", w, spec.key, k, err)
					}
				}
			}
		}
		fmt.Fprintf(os.Stderr, "\r%-14s done in %s%30s\n", w, time.Since(start).Round(time.Second), "")
	}
	return rep, nil
}

// runKernel measures one first sync into a fresh namespace's kernel and
// reps one-endpoint changes after it (warmup more unmeasured before
// them), then one bare restore of the first sync's input into another
// fresh namespace.
func runKernel(ctx context.Context, self, tmp, key, be string, w workload, reps, warmup int, rep *report) error {
	env, err := kernelEnv(tmp, be)
	if err != nil {
		return err
	}
	input := filepath.Join(tmp, "input")
	a := childArgs{System: key, Backend: be, Workload: w, Reps: reps, Warmup: warmup, InputOut: input}
	res, err := runChildProcess(ctx, self, a, env)
	if err != nil {
		return err
	}
	rep.add(w, key, be, res)
	floor, err := runChildProcess(ctx, self, childArgs{Backend: be, FloorIn: input}, env)
	if err != nil {
		return err
	}
	rep.add(w, key, be, floor)
	// The ratio of each run's pair, taken one after the other, is steadier
	// than the ratio of medians on a machine whose load drifts.
	rep.add(w, key, be, childResult{Samples: []sample{{Op: opOverFloor, Seconds: res.Samples[0].Seconds / floor.Samples[0].Seconds}}})
	return os.Remove(input)
}

// kernelEnv is the environment of a kernel child: iptables, iptables-save
// and iptables-restore on PATH are the backend's variant, which is how
// kube-proxy's iptables interface (which runs those names) is pointed at
// one, and the xtables lock is the benchmark's own.
func kernelEnv(tmp, be string) ([]string, error) {
	var suffix string
	switch be {
	case iptablesLegacy:
		suffix = "-legacy"
	case iptablesNFT:
		suffix = "-nft"
	default:
		return os.Environ(), nil
	}
	dir := filepath.Join(tmp, be)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore"} {
		target, err := exec.LookPath(strings.Replace(name, "iptables", "iptables"+suffix, 1))
		if err != nil {
			return nil, fmt.Errorf("%s needs %w", be, err)
		}
		link := filepath.Join(dir, name)
		if err := os.Symlink(target, link); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
	}
	// The xtables lock is one file for every namespace of the machine: a
	// private one keeps other programs' iptables runs from being timed.
	return append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"XTABLES_LOCKFILE="+filepath.Join(tmp, "xtables.lock")), nil
}

// runChildProcess runs one measurement in a child process with a network
// namespace of its own, which the kernel deletes when the child exits.
func runChildProcess(ctx context.Context, self string, a childArgs, env []string) (childResult, error) {
	var res childResult
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return res, err
	}
	a.ParentNetNS = ns
	arg, err := json.Marshal(a)
	if err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, self, "-child", string(arg))
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if os.Geteuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("%w: %s", err, lastLines(stderr.String(), 5))
	}
	if err := json.NewDecoder(&stdout).Decode(&res); err != nil && !errors.Is(err, io.EOF) {
		return res, err
	}
	return res, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
