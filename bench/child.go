package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"k8s.io/kubernetes/pkg/proxy/metrics"
	"k8s.io/kubernetes/pkg/proxy/util/nfacct"
)

// Operations measured, in the order of the table.
const (
	opFirst       = "first sync (objects given and synced)"
	opEndpoint    = "one-endpoint change"
	opAddService  = "one service added"
	opFull        = "forced full resync"
	opIdle        = "idle resync"
	opKernelFirst = "first sync into the kernel"
	// opKernelEndpoint is opEndpoint into the kernel: compute and write.
	opKernelEndpoint = "one-endpoint change into the kernel"
	opFloor          = "bare restore of the same input"
	opOverFloor      = "first sync over bare restore"
)

// sample is one measured operation.
type sample struct {
	Op      string
	Seconds float64
	// AllocBytes and Allocs are the heap allocations made during it.
	AllocBytes, Allocs uint64
	// Written is what it handed to the backend, in bytes.
	Written int
	// Calls is how many calls it made to the kernel one by one, for a
	// backend that counts them (callCounter).
	Calls *int `json:",omitempty"`
}

// childResult is what a child process prints, as JSON, on stdout.
type childResult struct {
	Samples []sample
	// PeakRSSKB is the child's VmHWM when it finished.
	PeakRSSKB int
	// Check is the correctness cross-check's result, for a check run.
	Check *checkResult `json:",omitempty"`
}

// baseline is the child that only makes a workload's objects, whose peak
// RSS every system's includes.
const baseline = "objects only"

// childArgs says what one child process measures.
type childArgs struct {
	System   string
	Backend  string
	Workload workload
	Reps     int
	// Warmup, for a kernel run, is how many one-endpoint changes go
	// unmeasured between the first sync and the measured ones.
	Warmup int `json:",omitempty"`
	// InputOut, for a kernel run, receives what the first sync restored.
	InputOut string
	// FloorIn, for a floor run, is the input to restore bare.
	FloorIn string
	// CPUProfile, if set, receives the child's CPU profile.
	CPUProfile string
	// NFTText runs proxykit's nftables dataplane through its nft text
	// path (-nft-text).
	NFTText bool `json:",omitempty"`
	// Check runs the correctness cross-check instead of measuring.
	Check bool
	// ParentNetNS is the parent's network namespace, which the child
	// must not be in.
	ParentNetNS string
}

// measure runs f after a garbage collection, so that every operation
// starts from the same heap, and returns its wall time and allocations.
func measure(op string, f func() error) (sample, error) {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	err := f()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&m1)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", op, err)
	}
	return sample{Op: op, Seconds: elapsed.Seconds(), AllocBytes: m1.TotalAlloc - m0.TotalAlloc, Allocs: m1.Mallocs - m0.Mallocs}, nil
}

// runChild is the body of a child process; the parent started it in a
// network namespace of its own, so that nothing it does (upstream's
// proxiers open netlink sockets and create nfacct counters even on a fake
// backend) reaches the machine's.
func runChild(a childArgs) (childResult, error) {
	var res childResult
	var err error
	if ns, err := os.Readlink("/proc/self/ns/net"); err != nil || a.ParentNetNS == "" || ns == a.ParentNetNS {
		return res, fmt.Errorf("-child runs only in a network namespace of its own, as the benchmark starts it")
	}
	if a.FloorIn != "" {
		s, err := restoreFloor(a.Backend, a.FloorIn)
		if err != nil {
			return res, err
		}
		res.Samples = append(res.Samples, s)
		return res, nil
	}
	if a.CPUProfile != "" {
		f, err := os.Create(a.CPUProfile)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	if a.Check {
		res.Check, err = crossCheck(a.Workload)
		return res, err
	}
	if a.System == baseline {
		c := newCluster(a.Workload)
		runtime.GC()
		res.PeakRSSKB = peakRSSKB()
		runtime.KeepAlive(c)
		return res, nil
	}
	return runSystem(a)
}

// childRun is one system measured on one workload: the samples so far.
type childRun struct {
	c   *cluster
	sys system
	be  backend
	res childResult
}

// runSystem measures a.System on a.Workload: for a kernel backend the
// first sync into the kernel alone, then a.Reps one-endpoint changes;
// else the first sync and a.Reps rounds of changes.
func runSystem(a childArgs) (childResult, error) {
	spec, err := lookupSystem(a.System)
	if err != nil {
		return childResult{}, err
	}
	if a.NFTText && spec.key == "proxykit-nftables" {
		spec.new = newProxykitNFTablesText
	}
	c := newCluster(a.Workload)
	sys, err := newSystem(spec, a.Backend, a.Workload.families())
	if err != nil {
		return childResult{}, err
	}
	r := &childRun{c: c, sys: sys, be: sys.backend()}
	if a.Backend != discard {
		err = r.kernel(a.InputOut, a.Warmup, a.Reps)
	} else {
		err = r.syncs(a.Reps)
	}
	if err != nil {
		return r.res, err
	}
	r.res.PeakRSSKB = peakRSSKB()
	return r.res, nil
}

// add measures f as op and records it with what it wrote.
func (r *childRun) add(op string, f func() error) error {
	r.be.beginSync()
	before, counted := kernelCalls(r.be)
	s, err := measure(op, f)
	if err != nil {
		return err
	}
	s.Written = r.be.written()
	if counted {
		after, _ := kernelCalls(r.be)
		s.Calls = ptr(after - before)
	}
	r.res.Samples = append(r.res.Samples, s)
	return nil
}

// feed gives the system the cluster's node, services and slices.
func (r *childRun) feed() {
	r.sys.updateNode(r.c.node)
	for i := range r.c.services {
		r.sys.updateService(nil, r.c.services[i])
		for _, sl := range r.c.slicesOf(i) {
			r.sys.updateSlice(nil, sl)
		}
	}
}

// kernel measures the first sync alone, the objects given beforehand, to
// set it beside the floor: a bare restore of its input, which it writes
// to inputOut. Then warmup one-endpoint changes unmeasured, and reps
// measured, each written to the kernel before it returns: the first few
// changes after a cold load pay for the kernel's deferred work of the
// load's transaction and for cold caches, which later ones do not.
func (r *childRun) kernel(inputOut string, warmup, reps int) error {
	r.feed()
	if err := r.add(opKernelFirst, r.sys.sync); err != nil {
		return err
	}
	input := r.be.firstInput()
	if len(input) == 0 {
		return fmt.Errorf("the first sync into the kernel left no input to restore bare")
	}
	if err := os.WriteFile(inputOut, input, 0o600); err != nil {
		return err
	}
	for w := range warmup {
		if err := r.changeEndpoint(reps + w); err != nil {
			return err
		}
	}
	for rep := range reps {
		if err := r.endpointChange(opKernelEndpoint, rep); err != nil {
			return err
		}
	}
	return nil
}

// syncs measures the first sync, objects given included, then reps rounds
// of an endpoint change, a service added, an idle sync and a full one.
func (r *childRun) syncs(reps int) error {
	if err := r.add(opFirst, func() error {
		r.feed()
		return r.sys.sync()
	}); err != nil {
		return err
	}
	for rep := range reps {
		if err := r.round(rep); err != nil {
			return err
		}
	}
	return nil
}

// round is the rep-th round of syncs.
func (r *childRun) round(rep int) error {
	c, sys := r.c, r.sys
	i := changedService(c, rep)
	if err := r.endpointChange(opEndpoint, rep); err != nil {
		return err
	}
	if err := r.add(opAddService, func() error {
		svc, slices := c.addService()
		sys.updateService(nil, svc)
		for _, sl := range slices {
			sys.updateSlice(nil, sl)
		}
		return sys.sync()
	}); err != nil {
		return err
	}
	if err := r.add(opIdle, sys.sync); err != nil {
		return err
	}
	// A failed sync is what forces a full one in every system; it
	// must have something to write, so it carries a change.
	r.be.failNext()
	for _, u := range c.changeEndpoint(i, (rep+1)%c.w.Endpoints) {
		sys.updateSlice(u.old, u.new)
	}
	if err := sys.sync(); err == nil {
		return fmt.Errorf("the sync meant to fail succeeded")
	}
	if err := r.add(opFull, sys.sync); err != nil {
		return err
	}
	if pk, ok := sys.(*proxykitSystem); ok && !pk.full {
		return fmt.Errorf("the sync after a failure was not a full one")
	}
	return nil
}

// changedService is the service whose endpoint the rep-th round changes.
func changedService(c *cluster, rep int) int { return (rep*7919 + 13) % len(c.services) }

// endpointChange measures, as op, the rep-th round's endpoint change and
// the sync after it.
func (r *childRun) endpointChange(op string, rep int) error {
	return r.add(op, func() error { return r.changeEndpoint(rep) })
}

// changeEndpoint makes the rep-th round's endpoint change and syncs.
func (r *childRun) changeEndpoint(rep int) error {
	for _, u := range r.c.changeEndpoint(changedService(r.c, rep), rep%r.c.w.Endpoints) {
		r.sys.updateSlice(u.old, u.new)
	}
	return r.sys.sync()
}

// restoreFloor times one bare restore of the input in file, by the
// backend's own restore command.
func restoreFloor(be, file string) (sample, error) {
	input, err := os.ReadFile(file)
	if err != nil {
		return sample{}, err
	}
	var cmd *exec.Cmd
	switch be {
	case iptablesLegacy:
		cmd = exec.Command("iptables-legacy-restore", "-w", "5", "--noflush")
	case iptablesNFT:
		cmd = exec.Command("iptables-nft-restore", "-w", "5", "--noflush")
	case nftables:
		cmd = exec.Command("nft", "-f", "-")
	default:
		return sample{}, fmt.Errorf("no bare restore for %s", be)
	}
	if be != nftables {
		if err := ensureNFAcct(); err != nil {
			return sample{}, err
		}
	}
	cmd.Stdin = bytes.NewReader(input)
	var s sample
	s, err = measure(opFloor, func() error {
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", cmd, err, out)
		}
		return nil
	})
	s.Written = len(input)
	return s, err
}

// ensureNFAcct creates, in this child's namespace, the nfacct counters
// kube-proxy's iptables rules count with, which its proxier creates
// before its first restore: a bare restore of its input needs them too.
func ensureNFAcct() error {
	acct, err := nfacct.New()
	if err != nil {
		return err
	}
	for _, name := range []string{metrics.IPTablesCTStateInvalidDroppedNFAcctCounter, metrics.LocalhostNodePortAcceptedNFAcctCounter} {
		if err := acct.Ensure(name); err != nil {
			return fmt.Errorf("nfacct counter %s: %w", name, err)
		}
	}
	return nil
}

// peakRSSKB is VmHWM, the process's peak resident set, in KiB.
func peakRSSKB() int {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	return 0
}

func writeChildResult(res childResult) error {
	return json.NewEncoder(os.Stdout).Encode(res)
}
