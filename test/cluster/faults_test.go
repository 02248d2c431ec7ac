package cluster

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

const fullSyncs = "kubeproxy_sync_full_proxy_rules_duration_seconds_count"

// faultLab is a two-node lab with service "s" served by the second node's
// first pod, seen from both nodes.
func faultLab(t *testing.T, args ...string) (*Lab, *v1.Service) {
	t.Helper()
	bins, agent := binaries(t)
	lab := NewLab(t, bins, agent, LabConfig{Nodes: 2, PodsPerNode: 2, AgentArgs: args})
	svc, err := Apply(context.Background(), lab.CP.Admin, NewService("s", 80), lab.Nodes[1].Pods[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range lab.Nodes {
		eventually(t, 30*time.Second, "s served on "+n.Name, func() error { return servedBy(n.Pods[0], ClusterAddr(svc), lab.Nodes[1].Pods[0]) })
	}
	return lab, svc
}

// arrives makes a change (moving s to the second node's second pod) and
// returns how long it took to reach every node's traffic, failing t after
// within.
func arrives(t *testing.T, lab *Lab, svc *v1.Service, within time.Duration) time.Duration {
	t.Helper()
	target := lab.Nodes[1].Pods[1]
	start := time.Now()
	if err := WriteSlice(context.Background(), lab.CP.Admin, NewSlice(svc, target)); err != nil {
		t.Fatal(err)
	}
	for _, n := range lab.Nodes {
		eventually(t, within-time.Since(start), "change after the fault on "+n.Name, func() error {
			return servedBy(n.Pods[0], ClusterAddr(svc), target)
		})
	}
	return time.Since(start)
}

func metric(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	v, err := n.Metric(name)
	if err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
	return v
}

// down keeps checking, for d, that every node still serves svc from the
// pod it was served by: no rule is removed while the API is away.
func down(t *testing.T, lab *Lab, svc *v1.Service, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		for _, n := range lab.Nodes {
			if err := servedBy(n.Pods[0], ClusterAddr(svc), lab.Nodes[1].Pods[0]); err != nil {
				t.Fatalf("while the control plane is away: %v", err)
			}
		}
	}
}

// TestFaultAPIServerRestart kills the apiserver for long enough that
// client-go's own backoff would reach tens of seconds, checks that the
// rules stay meanwhile, and that a change made once the restarted server
// is ready reaches every node within 5s, without a storm of full syncs.
func TestFaultAPIServerRestart(t *testing.T) {
	lab, svc := faultLab(t)
	before := map[string]float64{}
	for _, n := range lab.Nodes {
		before[n.Name] = metric(t, n, fullSyncs)
	}
	lab.CP.KillAPIServer()
	down(t, lab, svc, 20*time.Second)
	lab.CP.StartAPIServer() // returns once /readyz answers 200
	took := arrives(t, lab, svc, 5*time.Second)
	record(t, fmt.Sprintf("apiserver restart: change made at /readyz reached both nodes in %v", took.Round(time.Millisecond)))
	for _, n := range lab.Nodes {
		if d := metric(t, n, fullSyncs) - before[n.Name]; d > 1 {
			t.Errorf("%s: %v full syncs across the restart, want at most 1", n.Name, d)
		}
	}
}

// TestFaultEtcdRestart kills etcd under a running apiserver; once etcd and
// the apiserver are ready again a change reaches every node.
func TestFaultEtcdRestart(t *testing.T) {
	lab, svc := faultLab(t)
	lab.CP.KillEtcd()
	down(t, lab, svc, 10*time.Second)
	lab.CP.StartEtcd()
	if err := lab.CP.WaitReady(context.Background(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	took := arrives(t, lab, svc, 5*time.Second)
	record(t, fmt.Sprintf("etcd restart: change made at /readyz reached both nodes in %v", took.Round(time.Millisecond)))
}

// nftSyncs matches the nftables dataplane's log of a sync (at -v=2): full
// or not, and how many operations its transactions held.
var nftSyncs = regexp.MustCompile(`"Synced" dataplane="nftables" ipFamily="IPv4" full=(true|false) services=\d+ operations=(\d+)`)

// firstFullSync is the operations of the first full sync in log.
func firstFullSync(t *testing.T, log string) int {
	t.Helper()
	for _, m := range nftSyncs.FindAllStringSubmatch(log, -1) {
		if m[1] == "true" {
			ops, _ := strconv.Atoi(m[2])
			return ops
		}
	}
	t.Fatalf("no full sync logged:\n%s", log)
	return 0
}

// TestFaultAgentRestart kills an agent, changes services while it is away
// and restarts it: it converges, and (mode nftables, which reads the
// kernel back) its first sync writes only what changed.
func TestFaultAgentRestart(t *testing.T) {
	lab, svc := faultLab(t, "--proxy-mode=nftables", "-v=2")
	ctx := context.Background()
	var others []*v1.Service
	for i := range 20 {
		o, err := Apply(ctx, lab.CP.Admin, NewService(fmt.Sprintf("keep%d", i), 80), lab.Nodes[1].Pods[0])
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, o)
	}
	n := lab.Nodes[0]
	eventually(t, 30*time.Second, "keep19 served", func() error { return servedBy(n.Pods[0], ClusterAddr(others[19]), lab.Nodes[1].Pods[0]) })
	n.KillAgent()
	target := lab.Nodes[1].Pods[1]
	if err := WriteSlice(ctx, lab.CP.Admin, NewSlice(svc, target)); err != nil {
		t.Fatal(err)
	}
	added, err := Apply(ctx, lab.CP.Admin, NewService("added", 80), target)
	if err != nil {
		t.Fatal(err)
	}
	logBefore := len(n.AgentLog())
	n.StartAgent()
	eventually(t, 30*time.Second, "changed service after restart", func() error { return servedBy(n.Pods[0], ClusterAddr(svc), target) })
	eventually(t, 10*time.Second, "added service after restart", func() error { return servedBy(n.Pods[0], ClusterAddr(added), target) })
	for _, o := range others {
		if err := servedBy(n.Pods[0], ClusterAddr(o), lab.Nodes[1].Pods[0]); err != nil {
			t.Error(err)
		}
	}
	// A cold start of one service writes about as much as the warm start
	// of everything should: the 20 unchanged services cost nothing.
	cold := firstFullSync(t, n.AgentLog()[:logBefore])
	warm := firstFullSync(t, n.AgentLog()[logBefore:])
	record(t, fmt.Sprintf("agent restart (nftables): first sync wrote %d operations (cold start with 1 service: %d; 22 services now, 2 changed)", warm, cold))
	if warm > 2*cold {
		t.Errorf("warm start wrote %d operations, want at most %d (twice a cold start with one service)", warm, 2*cold)
	}
}

// TestFaultWatchExpiry restarts the apiserver after etcd has been
// compacted past the agents' resource versions, without its watch cache
// (so watches reach etcd): the agents' resumed watches expire ("too old
// resource version"), and they relist and converge.
func TestFaultWatchExpiry(t *testing.T) {
	lab, svc := faultLab(t, "-v=4")
	ctx := context.Background()
	logBefore := map[string]int{}
	for _, n := range lab.Nodes {
		logBefore[n.Name] = len(n.AgentLog())
	}
	lab.CP.KillAPIServer()
	if err := lab.CP.advanceEtcd(ctx, 50); err != nil {
		t.Fatal(err)
	}
	lab.CP.StartAPIServer("--watch-cache=false")
	took := arrives(t, lab, svc, 5*time.Second)
	record(t, fmt.Sprintf("watch expiry: change after the relist reached both nodes in %v", took.Round(time.Millisecond)))
	for _, n := range lab.Nodes {
		// The resumed watch either expires or, when the restart ended it
		// with an error first, the reflector relists at once: both relist.
		eventually(t, 10*time.Second, n.Name+" relists", func() error {
			if log := n.AgentLog()[logBefore[n.Name]:]; !strings.Contains(log, "too old") && !strings.Contains(log, `"Listing and watching"`) {
				return fmt.Errorf("no relist in the agent's log since the restart:\n%s", log)
			}
			return nil
		})
	}
}
