package cluster

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

const converge = 10 * time.Second

// TestConvergence creates, scales, changes and deletes services through
// the API and checks that every node's rules and real traffic follow.
func TestConvergence(t *testing.T) {
	bins, agent := binaries(t)
	lab := NewLab(t, bins, agent, LabConfig{Nodes: 3, PodsPerNode: 2, AgentArgs: []string{"--iptables-min-sync-period=0"}})
	ctx := context.Background()
	c := lab.CP.Admin
	n0, n1, n2 := lab.Nodes[0], lab.Nodes[1], lab.Nodes[2]
	client := n0.Pods[0]

	// everywhere checks the service from one pod of every node.
	everywhere := func(t *testing.T, what string, check func(p *Pod) error) {
		t.Helper()
		for _, n := range lab.Nodes {
			eventually(t, converge, what+" from "+n.Name, func() error { return check(n.Pods[0]) })
		}
	}

	web, err := Apply(ctx, c, NewService("web", 80), n1.Pods...)
	if err != nil {
		t.Fatal(err)
	}
	addr := ClusterAddr(web)
	t.Run("create", func(t *testing.T) {
		everywhere(t, "cluster IP", func(p *Pod) error { return servedBy(p, addr, n1.Pods...) })
	})
	t.Run("scale up across nodes", func(t *testing.T) {
		if _, err := Apply(ctx, c, NewService("web", 80), append(n1.Pods, n2.Pods[0])...); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "scaled up", func(p *Pod) error { return servedBy(p, addr, n1.Pods[0], n1.Pods[1], n2.Pods[0]) })
	})
	t.Run("scale down", func(t *testing.T) {
		if _, err := Apply(ctx, c, NewService("web", 80), n2.Pods[0]); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "scaled down", func(p *Pod) error { return servedBy(p, addr, n2.Pods[0]) })
	})
	t.Run("change port", func(t *testing.T) {
		web, err = Apply(ctx, c, NewService("web", 81), n2.Pods[0])
		if err != nil {
			t.Fatal(err)
		}
		newAddr := ClusterAddr(web)
		everywhere(t, "new port", func(p *Pod) error { return servedBy(p, newAddr, n2.Pods[0]) })
		everywhere(t, "old port gone", func(p *Pod) error { return unreachable(p, addr) })
		addr = newAddr
	})
	t.Run("no endpoints", func(t *testing.T) {
		if _, err := Apply(ctx, c, NewService("web", 81)); err != nil {
			t.Fatal(err)
		}
		everywhere(t, "rejected", func(p *Pod) error { return unreachable(p, addr) })
	})

	t.Run("node port", func(t *testing.T) {
		svc := NewService("np", 80)
		svc.Spec.Type = v1.ServiceTypeNodePort
		np, err := Apply(ctx, c, svc, n2.Pods...)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range lab.Nodes {
			eventually(t, converge, "node port of "+n.Name, func() error { return servedBy(client, NodePortAddr(np, n), n2.Pods...) })
		}
	})
	t.Run("external traffic policy Local", func(t *testing.T) {
		svc := NewService("local", 80)
		svc.Spec.Type = v1.ServiceTypeNodePort
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		local, err := Apply(ctx, c, svc, n1.Pods[0])
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, converge, "node port on the endpoint's node", func() error { return servedBy(client, NodePortAddr(local, n1), n1.Pods[0]) })
		eventually(t, converge, "node port on a node without endpoints", func() error { return unreachable(client, NodePortAddr(local, n2)) })
		// Cluster IPs ignore the external policy.
		everywhere(t, "cluster IP", func(p *Pod) error { return servedBy(p, ClusterAddr(local), n1.Pods[0]) })
	})
	t.Run("client IP affinity", func(t *testing.T) {
		svc := NewService("sticky", 80)
		svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		sticky, err := Apply(ctx, c, svc, n1.Pods[0], n1.Pods[1], n2.Pods[0], n2.Pods[1])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range lab.Nodes {
			eventually(t, converge, "affinity from "+n.Name, func() error {
				got, err := backends(n.Pods[0], ClusterAddr(sticky), 20)
				if err == nil && len(got) != 1 {
					t.Errorf("from %s: 20 connections with ClientIP affinity reached %v", n.Name, got)
				}
				return err
			})
		}
	})
	t.Run("delete", func(t *testing.T) {
		for _, name := range []string{"web", "np", "local", "sticky"} {
			if err := Delete(ctx, c, name); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range lab.Nodes {
			for _, name := range []string{"default/web", "default/np", "default/local", "default/sticky"} {
				eventually(t, converge, "rules of "+name+" gone from "+n.Name, func() error { return rulesMention(n, name, true) })
			}
		}
		everywhere(t, "deleted", func(p *Pod) error { return unreachable(p, addr) })
	})
	_ = n0
}
