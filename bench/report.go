package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

type resultKey struct {
	workload, system, backend, op string
}

// result is every sample of one operation of one system on one workload.
type result struct {
	seconds, allocBytes, allocs, written, calls []float64
}

type report struct {
	machine string
	cfg     runConfig
	results map[resultKey]*result
	checks  []workloadCheck
}

type workloadCheck struct {
	w     workload
	check *checkResult
}

func (r *report) add(w workload, system, backend string, res childResult) {
	get := func(op string) *result {
		k := resultKey{w.String(), system, backend, op}
		if r.results[k] == nil {
			r.results[k] = &result{}
		}
		return r.results[k]
	}
	for _, s := range res.Samples {
		x := get(s.Op)
		x.seconds = append(x.seconds, s.Seconds)
		x.allocBytes = append(x.allocBytes, float64(s.AllocBytes))
		x.allocs = append(x.allocs, float64(s.Allocs))
		x.written = append(x.written, float64(s.Written))
		if s.Calls != nil {
			x.calls = append(x.calls, float64(*s.Calls))
		}
	}
	if res.PeakRSSKB > 0 && backend == discard {
		get("peak RSS").seconds = append(get("peak RSS").seconds, float64(res.PeakRSSKB)*1024)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func fmtDuration(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	default:
		return fmt.Sprintf("%.3g µs", s*1e6)
	}
}

func fmtBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

func fmtCount(n float64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", n/1e3)
	default:
		return fmt.Sprintf("%.0f", n)
	}
}

// cell is one system's figure for a row, and the value a ratio uses.
type cell struct {
	text  string
	value float64
	ok    bool
}

// row is one line of a workload's table.
type row struct {
	title string
	// get returns a system's cell.
	get func(w workload, system string) cell
	// ratio turns upstream's and proxykit's values into the ratio column.
	ratio func(up, pk float64) string
}

func faster(up, pk float64) string {
	if up < pk {
		return fmt.Sprintf("%.1f× slower", pk/up)
	}
	return fmt.Sprintf("%.1f× faster", up/pk)
}
func smaller(up, pk float64) string {
	return fmt.Sprintf("%.2f×", pk/up)
}

func (r *report) timeRow(op, backend string) func(w workload, system string) cell {
	return func(w workload, system string) cell {
		x := r.results[resultKey{w.String(), system, backend, op}]
		if x == nil || len(x.seconds) == 0 {
			return cell{}
		}
		m := median(x.seconds)
		return cell{text: fmt.Sprintf("%s (%s–%s, n=%d)", fmtDuration(m), fmtDuration(slices.Min(x.seconds)),
			fmtDuration(slices.Max(x.seconds)), len(x.seconds)), value: m, ok: true}
	}
}

func (r *report) allocRow(op string) func(w workload, system string) cell {
	return func(w workload, system string) cell {
		x := r.results[resultKey{w.String(), system, discard, op}]
		if x == nil || len(x.allocBytes) == 0 {
			return cell{}
		}
		m := median(x.allocBytes)
		return cell{text: fmt.Sprintf("%s in %s objects", fmtBytes(m), fmtCount(median(x.allocs))), value: m, ok: true}
	}
}

// medianRow is the median of what of op's samples, printed by format.
func (r *report) medianRow(op string, what func(*result) []float64, format func(float64) string) func(w workload, system string) cell {
	return func(w workload, system string) cell {
		x := r.results[resultKey{w.String(), system, discard, op}]
		if x == nil || len(what(x)) == 0 {
			return cell{}
		}
		m := median(what(x))
		return cell{text: format(m), value: m, ok: true}
	}
}

func written(x *result) []float64 { return x.written }
func calls(x *result) []float64   { return x.calls }

func (r *report) rssRow(w workload, system string) cell {
	x := r.results[resultKey{w.String(), system, discard, "peak RSS"}]
	if x == nil || len(x.seconds) == 0 {
		return cell{}
	}
	m := median(x.seconds)
	return cell{text: fmt.Sprintf("%s (%s–%s)", fmtBytes(m), fmtBytes(slices.Min(x.seconds)), fmtBytes(slices.Max(x.seconds))), value: m, ok: true}
}

// rssOverBaseline is a system's peak RSS less that of a process holding
// only the workload's objects, which every system's process holds as an
// informer cache would.
func (r *report) rssOverBaseline(w workload, system string) cell {
	c := r.rssRow(w, system)
	b := r.rssRow(w, baseline)
	if !c.ok || !b.ok {
		return cell{}
	}
	v := c.value - b.value
	return cell{text: fmt.Sprintf("%s (objects alone: %s)", fmtBytes(v), fmtBytes(b.value)), value: v, ok: true}
}

// overFloor is a system's kernel first sync over the bare restore of its
// own input: the median of the runs' ratios.
func (r *report) overFloor(backend string) func(w workload, system string) cell {
	return func(w workload, system string) cell {
		x := r.results[resultKey{w.String(), system, backend, opOverFloor}]
		if x == nil || len(x.seconds) == 0 {
			return cell{}
		}
		v := median(x.seconds)
		return cell{text: fmt.Sprintf("%.2f× (%.2f–%.2f)", v, slices.Min(x.seconds), slices.Max(x.seconds)), value: v, ok: true}
	}
}

func (r *report) rows() []row {
	rows := []row{
		{opFirst, r.timeRow(opFirst, discard), faster},
		{opEndpoint, r.timeRow(opEndpoint, discard), faster},
		{opAddService, r.timeRow(opAddService, discard), faster},
		{opFull, r.timeRow(opFull, discard), faster},
		{opIdle, r.timeRow(opIdle, discard), faster},
		{"allocations, first sync", r.allocRow(opFirst), smaller},
		{"allocations, forced full resync", r.allocRow(opFull), smaller},
		{"allocations, one-endpoint change", r.allocRow(opEndpoint), smaller},
		{"peak RSS of the process", r.rssRow, smaller},
		{"peak RSS of the process, the workload's objects deducted", r.rssOverBaseline, smaller},
		{"bytes to the kernel, first sync", r.medianRow(opFirst, written, fmtBytes), smaller},
		{"bytes to the kernel, one-endpoint change", r.medianRow(opEndpoint, written, fmtBytes), smaller},
		{"IPVS, ipset and link calls, first sync", r.medianRow(opFirst, calls, fmtCount), smaller},
		{"IPVS, ipset and link calls, one-endpoint change", r.medianRow(opEndpoint, calls, fmtCount), smaller},
	}
	for _, k := range r.cfg.kernels {
		rows = append(rows,
			row{fmt.Sprintf("first sync into the kernel (objects given before), %s", kernelPath(k)), r.timeRow(opKernelFirst, k), faster},
			row{fmt.Sprintf("one-endpoint change into the kernel (compute and write), %s", kernelPath(k)), r.timeRow(opKernelEndpoint, k), faster},
			row{fmt.Sprintf("bare %s of the same %s", restoreName(k), floorInput(k)), r.timeRow(opFloor, k), faster},
			row{fmt.Sprintf("first sync ÷ bare restore (median of the runs' ratios), %s", k), r.overFloor(k), nil},
		)
	}
	return rows
}

// kernelPath says how each system reaches the kernel on backend be.
func kernelPath(be string) string {
	if be == nftables {
		return "nftables: kube-proxy through an nft process, proxykit over netlink"
	}
	return be + ", both through " + restoreName(be)
}

// floorInput is what the floor row restores.
func floorInput(be string) string {
	if be == nftables {
		return "ruleset (kube-proxy's nft input; proxykit's as the nft script it renders)"
	}
	return "input"
}

func restoreName(be string) string {
	switch be {
	case iptablesLegacy:
		return "iptables-legacy-restore"
	case iptablesNFT:
		return "iptables-nft-restore"
	default:
		return "nft -f"
	}
}

// warmupNote says how many unmeasured changes the kernel rows' measured
// ones follow, when there are kernel rows.
func (r *report) warmupNote() string {
	if len(r.cfg.kernels) == 0 {
		return ""
	}
	return fmt.Sprintf("Kernel rows' one-endpoint changes follow %d unmeasured ones. ", r.cfg.kernelWarmup)
}

// write prints the machine and one table per workload: each pair's
// upstream and proxykit figures side by side, and their ratio.
func (r *report) write(w io.Writer) {
	fmt.Fprintf(w, "%s\n", r.machine)
	fmt.Fprintf(w, "Medians of %d child processes per system and workload (first syncs, peak RSS, kernel runs) and %d repetitions in each (other operations; fewer at the largest workloads, as their n says); (min–max, number of samples). %sRatios are kube-proxy's figure over proxykit's, from the same run.\n\n",
		r.cfg.runs, r.cfg.reps, r.warmupNote())
	pairs := r.pairs()
	for _, wl := range r.cfg.workloads {
		fmt.Fprintf(w, "### %s\n\n", wl.title())
		header := []string{""}
		for _, p := range pairs {
			for _, s := range systems {
				if s.pair == p {
					header = append(header, s.title)
				}
			}
			header = append(header, p+" ratio")
		}
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
		for _, rw := range r.rows() {
			cols := []string{rw.title}
			for _, p := range pairs {
				var up, pk cell
				for _, s := range systems {
					if s.pair != p {
						continue
					}
					c := cell{text: "not built"}
					if s.new != nil {
						c = rw.get(wl, s.key)
						if !c.ok {
							c.text = "–"
						}
					}
					if s.upstream {
						up = c
					} else {
						pk = c
					}
					cols = append(cols, c.text)
				}
				ratio := "–"
				if rw.ratio != nil && up.ok && pk.ok && up.value > 0 && pk.value > 0 {
					ratio = rw.ratio(up.value, pk.value)
				}
				cols = append(cols, ratio)
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cols, " | "))
		}
		fmt.Fprintln(w)
	}
	r.writeChecks(w)
}

// pairs are the pairs of the systems run, in the order of systems.
func (r *report) pairs() []string {
	var pairs []string
	for _, s := range systems {
		if r.cfg.wants(s.key) && !slices.Contains(pairs, s.pair) {
			pairs = append(pairs, s.pair)
		}
	}
	return pairs
}

// writeChecks prints the correctness cross-check of each workload.
func (r *report) writeChecks(w io.Writer) {
	if len(r.checks) == 0 {
		return
	}
	fmt.Fprintf(w, "### Cross-check: the same verdicts\n\n")
	fmt.Fprintf(w, "Packets to a sample of at most %d services per workload (cluster IP from a pod, the node, outside and an own endpoint; an unserved port; node port and load-balancer VIP from inside and outside the source ranges), looked up in proxykit's State (the specification) and traced with proxykit's iptables tracer through kube-proxy's rules (its proxier's restore input and the jumps it ensured) and through proxykit's (read back from its FakeRunner):\n\n", maxCheckServices)
	for _, c := range r.checks {
		fmt.Fprintf(w, "- %s: %d packets, %d disagreements\n", c.w.title(), c.check.Packets, c.check.Disagreements)
		for _, e := range c.check.Examples {
			fmt.Fprintf(w, "  - `%s`\n", strings.ReplaceAll(e, "\n", " "))
		}
	}
	fmt.Fprintln(w)
}

// describeMachine is the line at the top of the table: CPU, cores,
// kernel, tools, date.
func describeMachine() string {
	cpu := "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(info)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	tool := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return name + " missing"
		}
		return strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("Machine: %s, %d cores, Linux %s; %s; %s; %s; %s, %s.",
		cpu, runtime.NumCPU(), strings.TrimSpace(string(kernel)),
		tool("iptables-legacy", "--version"), tool("iptables-nft", "--version"), tool("nft", "--version"),
		runtime.Version(), time.Now().UTC().Format("2006-01-02"))
}
