package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// churnRun is what runChurn did and measured.
type churnRun struct {
	changes, replaced, writes, missed, writeErrors atomic.Int64
	probes, probeFailures, discarded, late         atomic.Int64
	// latest is the longest a late probe waited for its answer after
	// the service's last change, in nanoseconds.
	latest atomic.Int64
	// series are each node's agent's, by node name; modelSeries the
	// model's.
	series      map[string][]*series
	modelSeries []*series
}

// Each agent's sampled series and the rise each may make across the
// samples after warm-up (their fitted line's, not the noise's):
//   - RSS 16 MiB: at 20 changes/s, 40 to 50 minutes after warm-up are
//     ~55,000 changes and ~3,000 syncs, so 16 MiB is under 300 bytes kept
//     per change or 6 KiB per sync, less than one Service or
//     EndpointSlice kept for good; over the short run it catches only a
//     gross leak.
//   - goroutines and open files 20, less the node's listening
//     sockets: mode userspace listens twice (and serves on a goroutine)
//     per cluster IP with a ready endpoint, a number that wanders with
//     the model's; the rest may not follow the changes, syncs or probes
//     (tens of thousands): what moves them is a probe in flight (which
//     userspace forwards on goroutines and sockets of its own) or a
//     scrape (in the short run, userspace's read 10 to 30 beyond its
//     listening sockets). The counts as read are shown beside them.
//   - conntrack entries other than TIME_WAIT 20: the probes' flows are
//     counted until their TIME_WAIT ends, a level that follows the probe
//     rate and its bursts (shown, not bounded); what is left is the flows
//     in progress and the agent's watch, and flows kept for good (never
//     closed, or stale) would rise with the changes and probes.
//   - kernel objects 5% of their level (at least 50), plus the model's
//     growth as a share of their level: the model's endpoints and ready
//     endpoints wander around their mean (each service's three candidates
//     are in, and ready, half the time), and a random walk can rise by 7%
//     over a short run or an hour (iptables writes about 4.5 objects per
//     ready endpoint, so 60 more ready endpoints are 270 more objects: a
//     fixed 5% failed on that). Objects follow endpoints at most in
//     proportion (services, a constant 1,000, cost objects too), so the
//     level times the model's largest relative rise bounds what the model
//     explains; an object left behind by each replaced service (one change
//     in ten, 7,000 an hour) would still pass the bound within minutes.
func agentSeries() []*series {
	return []*series{
		{name: "rss", label: " (MiB)", unit: 1 << 20, bound: func(_, _ float64) float64 { return 16 << 20 }},
		{name: "goroutines"},
		{name: "goroutines less listening sockets", bound: func(_, _ float64) float64 { return 20 }},
		{name: "open files"},
		{name: "open files less listening sockets", bound: func(_, _ float64) float64 { return 20 }},
		{name: "listening sockets"},
		{name: "conntrack entries"},
		{name: "conntrack entries other than TIME_WAIT", bound: func(_, _ float64) float64 { return 20 }},
		{name: "kernel objects", bound: func(mean, growth float64) float64 { return max(50, mean/20) + mean*growth }},
	}
}

// runChurn churns m at plan.rate from four writers while a prober on every
// node checks ten settled services every two seconds against the model,
// and samples the agents every plan.sample, for plan.duration.
func runChurn(t *testing.T, lab *Lab, m *churnModel, plan churnPlan) *churnRun {
	run := &churnRun{series: map[string][]*series{}}
	for _, n := range lab.Nodes {
		run.series[n.Name] = agentSeries()
	}
	run.modelSeries = []*series{{name: "services"}, {name: "endpoints"}, {name: "ready endpoints"}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ticks := make(chan struct{})
	for range 4 {
		// Writes use their own context: a change cut off by the end
		// would leave the model not knowing what the API holds.
		wg.Go(func() { run.write(t, m, ticks) })
	}
	wg.Go(func() {
		defer close(ticks)
		tk := time.NewTicker(time.Duration(float64(time.Second) / plan.rate))
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				select {
				case ticks <- struct{}{}:
				default:
					run.missed.Add(1)
				}
			}
		}
	})
	for _, n := range lab.Nodes {
		wg.Go(func() { run.probe(ctx, t, m, n.Pods[0], plan.settle) })
	}
	begin := time.Now()
	end := begin.Add(plan.duration)
	for {
		run.sample(t, lab, m, time.Since(begin), plan.sample >= time.Minute)
		if !time.Now().Before(end) {
			break
		}
		next := begin.Add(time.Duration(len(run.modelSeries[0].at)) * plan.sample)
		if end.Before(next) {
			next = end
		}
		time.Sleep(time.Until(next))
	}
	cancel()
	wg.Wait()
	return run
}

// report logs what the churn did and the table of every series, and fails
// t for a probe failed, a write failed or a series that grew.
func (run *churnRun) report(t *testing.T, lab *Lab, plan churnPlan) {
	t.Helper()
	record(t, fmt.Sprintf("churn: %v at %.0f changes/s: %d changes (%d services replaced), %d API writes, %d ticks missed, %d write errors",
		plan.duration, plan.rate, run.changes.Load(), run.replaced.Load(), run.writes.Load(), run.missed.Load(), run.writeErrors.Load()))
	record(t, fmt.Sprintf("churn: probes %d made, %d failed, %d late (answered as the model says only after their agent caught up, at most %v after the change), %d discarded (a change raced them)",
		run.probes.Load(), run.probeFailures.Load(), run.late.Load(), time.Duration(run.latest.Load()).Round(100*time.Millisecond), run.discarded.Load()))
	table := []string{tableHead()}
	growth := modelGrowth(run.modelSeries, plan.warmup)
	for _, n := range lab.Nodes {
		for _, s := range run.series[n.Name] {
			f := s.fit(plan.warmup, growth)
			table = append(table, s.row(fmt.Sprintf("%s %s", n.Name, churnModes[n.Index]), f))
			if !f.ok {
				t.Errorf("%s (%s): %s rose %.1f after warm-up, more than %.1f", n.Name, churnModes[n.Index], s.name, f.rise/max(s.unit, 1), f.allowed/max(s.unit, 1))
			}
		}
	}
	for _, s := range run.modelSeries {
		table = append(table, s.row("model", s.fit(plan.warmup, 0)))
	}
	record(t, fmt.Sprintf("churn: sampled every %v, fitted after %v of warm-up:\n%s", plan.sample, plan.warmup, strings.Join(table, "\n")))
	if n := run.probeFailures.Load(); n > 0 {
		t.Errorf("%d of %d probes not answered as the model says", n, run.probes.Load())
	}
	if n := run.writeErrors.Load(); n > 0 {
		t.Errorf("%d API writes failed", n)
	}
}

// write makes one change of the model per tick.
func (run *churnRun) write(t *testing.T, m *churnModel, ticks <-chan struct{}) {
	for range ticks {
		s := m.pick()
		if s == nil {
			run.missed.Add(1)
			continue
		}
		writes, replaced, err := m.change(context.Background(), s)
		run.changes.Add(1)
		run.writes.Add(int64(writes))
		if replaced {
			run.replaced.Add(1)
		}
		if err != nil && run.writeErrors.Add(1) <= 10 {
			t.Logf("churn write: %v", err)
		}
	}
}

// probe checks ten settled services from p every two seconds until ctx
// ends; a probe that a change raced is discarded. A probe answered
// otherwise than the model says is tried again every half second: one
// answered right before its service's last change is a minute old was
// late (its agent was behind, e.g. a restore stalled on a busy machine),
// else it failed.
func (run *churnRun) probe(ctx context.Context, t *testing.T, m *churnModel, p *Pod, settle time.Duration) {
	for ctx.Err() == nil {
		round := time.Now()
		for _, pc := range m.probeSample(10, settle) {
			err := pc.check(p, time.Second)
			for err != nil && m.unchanged(pc) && time.Since(pc.written) < churnPatience {
				time.Sleep(500 * time.Millisecond)
				if err2 := pc.check(p, time.Second); err2 == nil {
					wait := time.Since(pc.written)
					if run.late.Add(1) <= 10 {
						t.Logf("churn probe late: %v; answered as the model says %v after the change", err, wait.Round(100*time.Millisecond))
					}
					for cur := run.latest.Load(); int64(wait) > cur && !run.latest.CompareAndSwap(cur, int64(wait)); cur = run.latest.Load() {
					}
					err = nil
				}
			}
			if !m.unchanged(pc) {
				run.discarded.Add(1)
				continue
			}
			run.probes.Add(1)
			if err != nil && run.probeFailures.Add(1) <= 20 {
				t.Logf("churn probe at %s: %v", time.Now().Format("15:04:05.000"), err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(round.Add(2 * time.Second))):
		}
	}
}

// churnPatience is how long after a change a probe still waits for its
// agent to catch up before it fails.
const churnPatience = time.Minute

// sample reads every agent's series and the model's at once.
func (run *churnRun) sample(t *testing.T, lab *Lab, m *churnModel, at time.Duration, logSamples bool) {
	services, endpoints, ready := m.stats()
	for i, v := range []int{services, endpoints, ready} {
		run.modelSeries[i].add(at, float64(v))
	}
	for _, n := range lab.Nodes {
		v, err := sampleAgent(n, churnModes[n.Index])
		if err != nil {
			t.Errorf("sample at %v: %s: %v", at.Round(time.Second), n.Name, err)
			continue
		}
		for i, s := range run.series[n.Name] {
			s.add(at, v[i])
		}
		if logSamples {
			t.Logf("churn sample at %v: %s (%s): %s", at.Round(time.Second), n.Name, churnModes[n.Index], sampleLine(run.series[n.Name], v))
		}
	}
}

// sampleLine is one sample of every series, for the log of a long run.
func sampleLine(ss []*series, v []float64) string {
	var parts []string
	for i, s := range ss {
		parts = append(parts, fmt.Sprintf("%s %.1f", s.name, v[i]/max(s.unit, 1)))
	}
	return strings.Join(parts, ", ")
}

// sampleAgent reads n's agent's series, in agentSeries' order.
func sampleAgent(n *Node, mode string) ([]float64, error) {
	const rss, goroutines, fds = "process_resident_memory_bytes", "go_goroutines", "process_open_fds"
	v, err := n.Metrics(rss, goroutines, fds)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{rss, goroutines, fds} {
		if v[name] == 0 {
			return nil, fmt.Errorf("the agent's /metrics has no %s", name)
		}
	}
	// The count is the namespace's own: conntrack is per network
	// namespace.
	out, err := n.NS.Run("cat", "/proc/sys/net/netfilter/nf_conntrack_count")
	if err != nil {
		return nil, err
	}
	ct, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return nil, fmt.Errorf("nf_conntrack_count: %w", err)
	}
	if out, err = n.NS.Run("conntrack", "-L"); err != nil {
		return nil, err
	}
	live := 0
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] != "conntrack" && !strings.Contains(line, " TIME_WAIT ") {
			live++
		}
	}
	// A dump that meets the agent's write may fail: try again.
	var ks kernelState
	for try := range 3 {
		if ks, err = readKernelState(n, mode); err == nil {
			break
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	l := float64(ks.Listeners)
	return []float64{v[rss], v[goroutines], v[goroutines] - l, v[fds], v[fds] - l, l, float64(ct), float64(live), float64(ks.Objects)}, nil
}

// finalCheck probes every service of m once from every node, once the
// churn has stopped, every agent has synced again and every node's kernel
// state holds still.
func finalCheck(t *testing.T, lab *Lab, m *churnModel) {
	t.Helper()
	// Mode nftables flushes a chain nothing refers to at once and deletes
	// it in a later sync (Config.StaleChainDelay, 1s, later): after the
	// last change that is the periodic one, up to --iptables-sync-period
	// (30s) on.
	const lastSync = `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}`
	after := float64(time.Now().Add(2*time.Second).UnixNano()) / 1e9
	for i, n := range lab.Nodes {
		eventually(t, 2*time.Minute, n.Name+" synced after the churn", func() error {
			v, err := n.Metric(lastSync)
			if err == nil && v < after {
				err = fmt.Errorf("last sync %.1fs before the churn's end", after-v)
			}
			if err != nil {
				time.Sleep(time.Second)
			}
			return err
		})
		waitKernelStable(t, n, churnModes[i])
	}
	var cases []probeCase
	for _, s := range m.live {
		cases = append(cases, probeCase{s: s, version: s.version, addr: ClusterAddr(s.svc), want: s.serving()})
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, n := range lab.Nodes {
		wg.Go(func() {
			for _, pc := range cases {
				if err := pc.check(n.Pods[0], time.Second); err != nil && failed.Add(1) <= 20 {
					t.Errorf("after the churn: %v", err)
				}
			}
		})
	}
	wg.Wait()
	record(t, fmt.Sprintf("churn: after it, %d services probed from each of %d nodes: %d answers not as the model says",
		len(cases), len(lab.Nodes), failed.Load()))
}

// waitKernelStable waits until two readings of n's kernel state, two
// seconds apart, are the same, and returns the last.
func waitKernelStable(t *testing.T, n *Node, mode string) kernelState {
	t.Helper()
	var prev, cur kernelState
	eventually(t, 2*time.Minute, n.Name+"'s kernel state holding still", func() error {
		var err error
		if cur, err = readKernelState(n, mode); err != nil {
			return err
		}
		if cur.Canonical != prev.Canonical {
			prev = cur
			time.Sleep(2 * time.Second)
			return fmt.Errorf("changed within 2s")
		}
		return nil
	})
	return cur
}

// compareFresh compares n's kernel state, programmed by its churned agent,
// with the one a fresh agent of the same mode programs on the same node
// for the same objects: the churned agent is killed, the node cleaned with
// the agent's --cleanup (which must leave nothing), a new agent started.
func compareFresh(t *testing.T, n *Node, mode string, services int) {
	t.Helper()
	churned := waitKernelStable(t, n, mode)
	n.KillAgent()
	if out, err := n.NS.Run(n.lab.bin, "--cleanup"); err != nil {
		t.Fatalf("%s: --cleanup: %v: %s", n.Name, err, out)
	}
	clean, err := readKernelState(n, mode)
	if err != nil {
		t.Fatal(err)
	}
	// The lab's nodes hold no other program's objects: --cleanup must
	// leave none, not even the empty base chains iptables-nft made.
	if clean.Objects != 0 {
		t.Errorf("%s (%s): %d kernel objects left after --cleanup, want none:\n%s", n.Name, mode, clean.Objects, clean.Canonical)
	}
	n.StartAgent("--proxy-mode=" + mode)
	waitFirstSync(t, n, services, 5*time.Minute)
	fresh := waitKernelStable(t, n, mode)
	same := churned.Canonical == fresh.Canonical
	record(t, fmt.Sprintf("churn: %s (%s): kernel state after the churn %d objects (%d once cleaned up), a fresh agent's %d; canonical forms identical: %v; raw dumps identical: %v",
		n.Name, mode, churned.Objects, clean.Objects, fresh.Objects, same, churned.Raw == fresh.Raw))
	if !same {
		dir := os.TempDir()
		for name, s := range map[string]kernelState{"churned": churned, "fresh": fresh} {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("proxykit-churn-%s-%s.txt", mode, name)), []byte(s.Canonical), 0o644)
		}
		t.Errorf("%s (%s): the churned agent's kernel state differs from a fresh agent's (both in %s/proxykit-churn-%s-*.txt):\n%s",
			n.Name, mode, dir, mode, stateDiff(churned.Canonical, fresh.Canonical, 20))
	}
}
