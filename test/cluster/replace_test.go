package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// settle is how long traffic runs after each step of a replacement, so
// that every state the kernel passes through is crossed by new
// connections.
const settle = time.Second

// TestReplaceKubeProxy replaces upstream kube-proxy with the agent and
// back, in iptables and then in nftables mode (the agent in the same
// mode), on two nodes, following the procedure of the agent's README
// ("Replacing kube-proxy") while every node's client pod opens a new
// connection to the service's cluster IP and to a node port every 100 ms
// and keeps long-lived connections to both: no new connection may fail,
// every long-lived connection must survive with its conntrack entries
// untouched, and at the end only the new owner's objects are in the
// kernel.
func TestReplaceKubeProxy(t *testing.T) {
	bins, agent := binaries(t)
	Require(t, "nft", "ip6tables-save", "conntrack")
	lab := NewLab(t, bins, agent, LabConfig{Nodes: 2, PodsPerNode: 2, NoAgents: true})
	servers := []*Pod{lab.Nodes[0].Pods[1], lab.Nodes[1].Pods[1]}
	clients := []*Pod{lab.Nodes[0].Pods[0], lab.Nodes[1].Pods[0]}
	for _, p := range servers {
		serveEcho(t, p)
	}
	svc := NewService("web", 80)
	svc.Spec.Type = v1.ServiceTypeNodePort
	svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "echo", Protocol: v1.ProtocolTCP, Port: 81, TargetPort: intstr.FromInt32(EchoPort)})
	svc, err := Apply(context.Background(), lab.CP.Admin, svc, servers...)
	if err != nil {
		t.Fatal(err)
	}
	// The node port is reached on the second node from both clients: from
	// the first it crosses nodes, and either way it is masqueraded, so the
	// two proxies' masquerade marks meet.
	n1 := lab.Nodes[1]
	targets := []Target{
		{Name: "cluster IP", Addr: ClusterAddr(svc), EchoAddr: net.JoinHostPort(svc.Spec.ClusterIP, "81")},
		{Name: "node port", Addr: NodePortAddr(svc, n1), EchoAddr: net.JoinHostPort(n1.IP, strconv.Itoa(int(svc.Spec.Ports[1].NodePort)))},
	}
	for _, mode := range []string{"iptables", "nftables"} {
		ok := t.Run(mode, func(t *testing.T) {
			for _, n := range lab.Nodes {
				n.StartKubeProxy(mode)
			}
			for _, n := range lab.Nodes {
				eventually(t, 60*time.Second, "kube-proxy synced on "+n.Name, func() error { return n.Synced(MetricsAddr) })
			}
			for _, c := range clients {
				for _, tg := range targets {
					eventually(t, 10*time.Second, "kube-proxy serves "+tg.Name, func() error { return servedBy(c, tg.Addr, servers...) })
				}
			}
			if !t.Run("kube-proxy to agent", func(t *testing.T) {
				replace(t, lab, clients, targets, toAgent(mode))
			}) {
				return
			}
			t.Run("agent to kube-proxy", func(t *testing.T) {
				replace(t, lab, clients, targets, toKubeProxy(mode, svc))
			})
			// The next mode starts from a node without kube-proxy.
			for _, n := range lab.Nodes {
				n.StopKubeProxy()
				if out, err := n.KubeProxyCleanup(); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
			}
		})
		if !ok {
			return
		}
	}
}

// step is one step of a replacement procedure, done on every node.
type step struct {
	what string
	do   func(t *testing.T, n *Node)
}

// procedure is a replacement: its steps, and who owns the kernel after.
type procedure struct {
	steps    []step
	from, to Owner
}

// toAgent is the README's procedure from kube-proxy to the agent.
func toAgent(mode string) procedure {
	return procedure{from: KubeProxy, to: Agent, steps: []step{
		{"start the agent beside kube-proxy, on other ports", func(t *testing.T, n *Node) {
			n.StartAgent("--proxy-mode", mode, "--healthz-bind-address", SideBySideHealthz, "--metrics-bind-address", SideBySideMetrics)
		}},
		{"wait for the agent's first sync", func(t *testing.T, n *Node) {
			eventually(t, 30*time.Second, "agent synced on "+n.Name, func() error { return n.Synced(SideBySideMetrics) })
		}},
		{"stop kube-proxy", func(t *testing.T, n *Node) { n.StopKubeProxy() }},
		{"kube-proxy --cleanup", func(t *testing.T, n *Node) {
			if out, err := n.KubeProxyCleanup(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}},
		{"restart the agent on kube-proxy's ports", func(t *testing.T, n *Node) {
			n.StopAgent()
			n.StartAgent("--proxy-mode", mode)
			eventually(t, 30*time.Second, "agent synced on "+n.Name, func() error { return n.Synced(MetricsAddr) })
		}},
	}}
}

// toKubeProxy is the README's procedure from the agent back to kube-proxy.
func toKubeProxy(mode string, svc *v1.Service) procedure {
	return procedure{from: Agent, to: KubeProxy, steps: []step{
		{"start kube-proxy beside the agent (its ports busy: it retries them)", func(t *testing.T, n *Node) { n.StartKubeProxy(mode) }},
		{"wait until kube-proxy has programmed the service", func(t *testing.T, n *Node) {
			eventually(t, 60*time.Second, "kube-proxy's rules on "+n.Name, func() error { return kubeProxyProgrammed(n, mode, svc) })
		}},
		{"stop the agent", func(t *testing.T, n *Node) { n.StopAgent() }},
		{"nodeagent --cleanup", func(t *testing.T, n *Node) {
			if out, err := n.AgentCleanup(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}},
		{"wait until kube-proxy serves its ports", func(t *testing.T, n *Node) {
			eventually(t, 30*time.Second, "kube-proxy's metrics on "+n.Name, func() error { return n.Synced(MetricsAddr) })
		}},
	}}
}

// replace runs p's steps on every node under traffic and checks that no
// connection failed and that only p.to's objects are left.
func replace(t *testing.T, lab *Lab, clients []*Pod, targets []Target, p procedure) {
	tr := StartTraffic(t, lab.Nodes, clients, targets, 2)
	stopped := false
	defer func() {
		if !stopped {
			_, _ = tr.Stop()
		}
	}()
	time.Sleep(settle)
	start := time.Now()
	for _, s := range p.steps {
		for _, n := range lab.Nodes {
			tr.Event(s.what + " on " + n.Name)
			s.do(t, n)
		}
		time.Sleep(settle)
	}
	took := time.Since(start)
	stopped = true
	res, err := tr.Stop()
	if err != nil {
		t.Fatal(err)
	}
	record(t, fmt.Sprintf("%s: procedure took %v; %v", t.Name(), took.Round(time.Millisecond), res))
	if res.Failed > 0 || res.LongSurvived < res.Long || res.Kept < res.Tracked || res.Tracked < res.Long {
		t.Errorf("%v\nfailures:\n  %s\nsteps:\n  %s", res, strings.Join(res.Failures, "\n  "), strings.Join(res.Events, "\n  "))
	}
	for _, n := range lab.Nodes {
		if left, err := n.Objects(p.from); err != nil || len(left) > 0 {
			t.Errorf("%s: left of the previous owner: %v %v", n.Name, left, err)
		}
		if have, err := n.Objects(p.to); err != nil || len(have) == 0 {
			t.Errorf("%s: the new owner holds %v %v", n.Name, have, err)
		}
	}
}

// kubeProxyProgrammed checks that kube-proxy's rules on n (in mode) send
// svc's cluster IP somewhere.
func kubeProxyProgrammed(n *Node, mode string, svc *v1.Service) error {
	var out string
	var err error
	if mode == "nftables" {
		out, err = n.NS.Run("nft", "list", "map", "ip", "kube-proxy", "service-ips")
	} else {
		out, err = n.NS.Run("iptables", "-t", "nat", "-S", "KUBE-SERVICES")
	}
	if err != nil {
		return err
	}
	if !strings.Contains(out, svc.Spec.ClusterIP) {
		return fmt.Errorf("%s: kube-proxy's rules do not name %s yet:\n%s", n.Name, svc.Spec.ClusterIP, out)
	}
	return nil
}
