package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// changes is how many endpoint changes a latency measurement makes.
func changes() int {
	if testing.Short() {
		return 20
	}
	return 200
}

// TestLatency measures event-to-rule latency: from an EndpointSlice update
// through the API to the first connection from a pod on another node that
// reaches the new endpoint, over many changes, at --iptables-min-sync-period
// 0 and at its default (1s).
func TestLatency(t *testing.T) {
	bins, agent := binaries(t)
	lab := NewLab(t, bins, agent, LabConfig{Nodes: 2, PodsPerNode: 2, NoAgents: true})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"min-sync-period 0", []string{"--iptables-min-sync-period=0"}},
		{"default min-sync-period", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := lab.Nodes[0]
			n.StartAgent(tc.args...)
			defer n.KillAgent()
			d, _ := measureChanges(t, lab, "lat", changes())
			report(t, "endpoint change → rule, "+tc.name, d)
		})
	}
}

// TestLatencyAtSize measures event-to-rule latency at
// --iptables-min-sync-period 0 in mode nftables with 100 and with scale()
// services (each with 10 endpoints) in the API, and in mode iptables with
// 100, beside the agent's sync time, the API write alone and (iptables)
// one iptables-restore, the floor of that mode. The large size runs only
// with PROXYKIT_CLUSTER_AT_SCALE=1 (it takes minutes; TestScale covers
// that size in CI). With PROXYKIT_CLUSTER_PROFILE set to a folder, a CPU
// profile of the agent over each measurement is written there.
func TestLatencyAtSize(t *testing.T) {
	bins, agent := binaries(t)
	lab := NewLab(t, bins, agent, LabConfig{Nodes: 2, PodsPerNode: 2, NoAgents: true})
	sizes := []int{100}
	if os.Getenv("PROXYKIT_CLUSTER_AT_SCALE") == "1" {
		sizes = append(sizes, scale())
	}
	created := 0
	for _, size := range sizes {
		createServices(t, lab, created, size)
		created = size
		for _, mode := range []string{"nftables", "iptables"} {
			if mode == "iptables" && size > 100 {
				// Where iptables is the nf_tables backend (Debian's
				// default), the first restore of 100,000 endpoints
				// took over 10 minutes here: TestScale's reason to run
				// nftables at that size.
				continue
			}
			t.Run(fmt.Sprintf("%s %d services", mode, size), func(t *testing.T) {
				n := lab.Nodes[0]
				n.StartAgent("--proxy-mode="+mode, "--iptables-min-sync-period=0", "--profiling")
				defer n.KillAgent()
				waitFirstSync(t, n, size, 10*time.Minute)
				what := fmt.Sprintf("%s, %d services, min-sync-period 0", mode, size)
				measureAtSize(t, lab, fmt.Sprintf("%s-%d", mode, size), what)
				if mode == "iptables" {
					report(t, "one iptables-restore (a chain of 3 rules written, then removed), "+what, restoreFloor(t, n, 40))
				}
			})
		}
	}
}

// restoreFloor times count runs of iptables-restore --noflush in n's
// namespace, as the agent runs it, each writing a partial sync's worth
// (a chain of three rules, or its removal) into the nat table the agent
// programmed: the process and its reading of that table, which every
// partial sync pays at this size.
func restoreFloor(t *testing.T, n *Node, count int) []time.Duration {
	t.Helper()
	inputs := []string{
		"*nat\n:PK-FLOOR - [0:0]\n-A PK-FLOOR -m comment --comment floor -j MARK --set-xmark 0x4000/0x4000\n" +
			"-A PK-FLOOR -s 10.244.1.2/32 -j RETURN\n-A PK-FLOOR -p tcp -j DNAT --to-destination 10.244.1.3:8080\nCOMMIT\n",
		"*nat\n-F PK-FLOOR\n-X PK-FLOOR\nCOMMIT\n",
	}
	var out []time.Duration
	for i := range count {
		cmd := exec.Command("iptables-restore", "-w", "5", "--noflush")
		cmd.Stdin = strings.NewReader(inputs[i%2])
		start := time.Now()
		if err := n.NS.do(func() error {
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("iptables-restore: %w: %s", err, b)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// measureAtSize runs measureChanges on lab's first node's agent and
// reports the latencies, the API writes and the agent's mean sync time
// over them, with a CPU profile if PROXYKIT_CLUSTER_PROFILE names a folder.
func measureAtSize(t *testing.T, lab *Lab, name, what string) {
	t.Helper()
	n := lab.Nodes[0]
	const syncs = "kubeproxy_sync_proxy_rules_duration_seconds"
	sum0, _ := n.Metric(syncs + "_sum")
	count0, _ := n.Metric(syncs + "_count")
	prof := make(chan error, 1)
	count := changes()
	if dir := os.Getenv("PROXYKIT_CLUSTER_PROFILE"); dir != "" {
		go func() { prof <- n.CPUProfile(filepath.Join(dir, "cpu-"+name+".pprof"), 15*time.Second) }()
	} else {
		prof <- nil
	}
	d, writes := measureChanges(t, lab, "lat-"+name, count)
	sum1, _ := n.Metric(syncs + "_sum")
	count1, _ := n.Metric(syncs + "_count")
	report(t, "endpoint change → rule, "+what, d)
	report(t, "API write alone, "+what, writes)
	if count1 > count0 {
		mean := time.Duration((sum1 - sum0) / (count1 - count0) * float64(time.Second))
		record(t, fmt.Sprintf("agent sync, %s: %d syncs, mean %v", what, int(count1-count0), mean.Round(10*time.Microsecond)))
	}
	if err := <-prof; err != nil {
		t.Error(err)
	}
}

// measureChanges creates service name with one endpoint on the second
// node, then moves that endpoint between the node's two pods count times,
// each time measuring from the update's start until a connection from the
// first node's pod reaches the new endpoint. It returns those latencies
// and, apart, how long each API write took.
func measureChanges(t *testing.T, lab *Lab, name string, count int) (latency, writes []time.Duration) {
	t.Helper()
	ctx := context.Background()
	c := lab.CP.Admin
	client, pods := lab.Nodes[0].Pods[0], lab.Nodes[len(lab.Nodes)-1].Pods
	svc, err := Apply(ctx, c, NewService(name, 80), pods[0])
	if err != nil {
		t.Fatal(err)
	}
	addr := ClusterAddr(svc)
	eventually(t, 30*time.Second, "service "+name+" served", func() error { return servedBy(client, addr, pods[0]) })
	slice := NewSlice(svc, pods[0])
	cur, err := c.DiscoveryV1().EndpointSlices(Namespace).Get(ctx, slice.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range count {
		target := pods[(i+1)%2]
		cur.Endpoints = []discovery.Endpoint{PodEndpoint(target)}
		start := time.Now()
		if cur, err = c.DiscoveryV1().EndpointSlices(Namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		writes = append(writes, time.Since(start))
		deadline := start.Add(15 * time.Second)
		for {
			got, err := client.Get(addr, 200*time.Millisecond)
			if err == nil && got == target.Name {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("change %d: %s not served by %s within 15s (last: %q, %v)", i, addr, target.Name, got, err)
			}
		}
		latency = append(latency, time.Since(start))
	}
	return latency, writes
}

// percentile is the p-th percentile (0–100) of sorted d, nearest rank.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(float64(len(d))*p/100+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// report logs a latency distribution and, with PROXYKIT_CLUSTER_RESULTS
// set to a file, appends it there for the README's table.
func report(t *testing.T, what string, d []time.Duration) {
	t.Helper()
	s := slices.Clone(d)
	slices.Sort(s)
	line := fmt.Sprintf("%s: n=%d p50=%v p90=%v p99=%v max=%v", what, len(s),
		percentile(s, 50).Round(100*time.Microsecond), percentile(s, 90).Round(100*time.Microsecond), percentile(s, 99).Round(100*time.Microsecond), s[len(s)-1].Round(100*time.Microsecond))
	record(t, line)
}

// record logs line and appends it to $PROXYKIT_CLUSTER_RESULTS if set.
func record(t *testing.T, line string) {
	t.Helper()
	t.Log(line)
	if path := os.Getenv("PROXYKIT_CLUSTER_RESULTS"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), line)
	}
}
