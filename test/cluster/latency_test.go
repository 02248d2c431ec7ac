package cluster

import (
	"context"
	"fmt"
	"os"
	"slices"
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
			d := measureChanges(t, lab, "lat", changes())
			report(t, "endpoint change → rule, "+tc.name, d)
		})
	}
}

// measureChanges creates service name with one endpoint on the second
// node, then moves that endpoint between the node's two pods count times,
// each time measuring from the update's start until a connection from the
// first node's pod reaches the new endpoint.
func measureChanges(t *testing.T, lab *Lab, name string, count int) []time.Duration {
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
	var out []time.Duration
	for i := range count {
		target := pods[(i+1)%2]
		cur.Endpoints = []discovery.Endpoint{PodEndpoint(target)}
		start := time.Now()
		if cur, err = c.DiscoveryV1().EndpointSlices(Namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
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
		out = append(out, time.Since(start))
	}
	return out
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
	s := slices.Clone(d)
	slices.Sort(s)
	line := fmt.Sprintf("%s: n=%d p50=%v p99=%v max=%v", what, len(s),
		percentile(s, 50).Round(100*time.Microsecond), percentile(s, 99).Round(100*time.Microsecond), s[len(s)-1].Round(100*time.Microsecond))
	record(t, line)
}

// record logs line and appends it to $PROXYKIT_CLUSTER_RESULTS if set.
func record(t *testing.T, line string) {
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
