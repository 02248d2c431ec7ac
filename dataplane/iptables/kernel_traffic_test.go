package iptables

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// TestKernelServices programs one State with a service of each kind into a
// node namespace and sends real TCP and UDP traffic through it.
func TestKernelServices(t *testing.T) {
	hostLocalnet, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/route_localnet")
	if err != nil {
		t.Fatal(err)
	}
	l := newLab(t, false)
	serve(t, l.pod1, "pod1", hostPort(l.pod1IP, 8080))
	serve(t, l.pod2, "pod2", hostPort(l.pod2IP, 8080))
	local := dataplanetest.ReadyEndpoint(l.pod1IP, dataplanetest.NodeName)
	remote := dataplanetest.ReadyEndpoint(l.pod2IP, otherNode)

	c := l.cluster(t)
	c.service(l, "web", "172.30.0.10", 30080, func(s *v1.Service) {
		s.Spec.ExternalIPs = []string{"192.168.99.11"}
	}, local, remote)
	c.service(l, "lb", "172.30.0.11", 30090, func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = []string{"192.168.0.0/25"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "1.2.3.4"}}
	}, local, remote)
	c.service(l, "etp-local", "172.30.0.12", 30100, func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}, local, remote)
	c.service(l, "itp-local", "172.30.0.13", 0, func(s *v1.Service) {
		p := v1.ServiceInternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = &p
	}, local, remote)
	c.service(l, "sticky", "172.30.0.14", 0, func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	}, local, remote)
	c.service(l, "empty", "172.30.0.15", 30110, nil)
	c.service(l, "hairpin", "172.30.0.16", 0, nil, local)

	dp := newNSDataplane(t, l.node, Config{})
	ctx := t.Context()
	if err := dp.Sync(ctx, c.build()); err != nil {
		t.Fatal(err)
	}
	both := []string{"pod1", "pod2"}
	servers := func(seen map[string]int) []string { return slices.Sorted(maps.Keys(seen)) }

	t.Run("ClusterIP from the node", func(t *testing.T) {
		for _, proto := range []string{"tcp", "udp"} {
			if got := servers(answers(t, l.node, proto, "", "172.30.0.10:80", 30)); !slices.Equal(got, both) {
				t.Errorf("%s: answered by %v, want %v", proto, got, both)
			}
		}
	})
	t.Run("ClusterIP from a pod", func(t *testing.T) {
		r := mustAnswer(t, l.pod2, "tcp", "", "172.30.0.10:80")
		if r.server == "pod1" && r.client != l.pod2IP {
			t.Errorf("pod traffic masqueraded: server saw %s", r.client)
		}
		for _, proto := range []string{"tcp", "udp"} {
			if got := servers(answers(t, l.pod2, proto, "", "172.30.0.10:80", 30)); !slices.Equal(got, both) {
				t.Errorf("%s: answered by %v, want %v", proto, got, both)
			}
		}
	})
	t.Run("NodePort from outside is masqueraded", func(t *testing.T) {
		for _, proto := range []string{"tcp", "udp"} {
			port := 30080
			if proto == "udp" {
				port = 30081
			}
			r := mustAnswer(t, l.client, proto, l.clientIP, hostPort(l.nodeIP, port))
			if r.client == l.clientIP {
				t.Errorf("%s: eTP Cluster node port kept the client address", proto)
			}
		}
	})
	t.Run("NodePort on localhost", func(t *testing.T) {
		mustAnswer(t, l.node, "tcp", "", "127.0.0.1:30080")
		if got := strings.TrimSpace(l.node.MustRun("cat", "/proc/sys/net/ipv4/conf/all/route_localnet")); got != "1" {
			t.Errorf("route_localnet in the node namespace = %s, want 1", got)
		}
		// The test process is in the machine's namespace: it must not
		// have been touched.
		if host, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/route_localnet"); err != nil || string(host) != string(hostLocalnet) {
			t.Errorf("the machine's route_localnet changed: %q -> %q (%v)", hostLocalnet, host, err)
		}
	})
	t.Run("external IP from outside", func(t *testing.T) {
		mustAnswer(t, l.client, "tcp", l.clientIP, "192.168.99.11:80")
	})
	t.Run("LoadBalancer allowed source", func(t *testing.T) {
		mustAnswer(t, l.client, "tcp", l.clientIP, "1.2.3.4:80")
	})
	t.Run("LoadBalancer blocked source", func(t *testing.T) {
		if r, err := dial(l.client, "tcp", l.blockedIP, "1.2.3.4:80", blockedTimeout); err == nil {
			t.Errorf("blocked source reached %s", r.server)
		} else if refused(err) {
			t.Errorf("blocked source was refused, want dropped: %v", err)
		}
		// Node ports ignore loadBalancerSourceRanges.
		mustAnswer(t, l.client, "tcp", l.blockedIP, hostPort(l.nodeIP, 30090))
	})
	t.Run("externalTrafficPolicy Local", func(t *testing.T) {
		for range 10 {
			r := mustAnswer(t, l.client, "tcp", l.clientIP, hostPort(l.nodeIP, 30100))
			if r.server != "pod1" || r.client != l.clientIP {
				t.Fatalf("got %+v, want the local pod seeing the client address %s", r, l.clientIP)
			}
		}
		// Pods ignore the policy and reach every endpoint.
		if got := servers(answers(t, l.pod2, "tcp", "", hostPort(l.nodeIP, 30100), 30)); !slices.Equal(got, both) {
			t.Errorf("pod to eTP Local node port answered by %v, want %v", got, both)
		}
	})
	t.Run("internalTrafficPolicy Local", func(t *testing.T) {
		if got := servers(answers(t, l.node, "tcp", "", "172.30.0.13:80", 15)); !slices.Equal(got, []string{"pod1"}) {
			t.Errorf("answered by %v, want only the local pod1", got)
		}
	})
	t.Run("ClientIP affinity", func(t *testing.T) {
		if got := answers(t, l.pod2, "tcp", "", "172.30.0.14:80", 15); len(got) != 1 {
			t.Errorf("one client reached %v, want one backend", got)
		}
	})
	t.Run("no endpoints is refused at once", func(t *testing.T) {
		for _, target := range []struct {
			ns   *netns.NS
			addr string
		}{{l.node, "172.30.0.15:80"}, {l.pod2, "172.30.0.15:80"}, {l.client, hostPort(l.nodeIP, 30110)}} {
			start := time.Now()
			if _, err := dial(target.ns, "tcp", "", target.addr, dialTimeout); !refused(err) {
				t.Errorf("%s from %s: %v, want connection refused", target.addr, target.ns.Name, err)
			}
			t.Logf("%s from %s refused in %v", target.addr, target.ns.Name, time.Since(start))
		}
	})
	t.Run("hairpin", func(t *testing.T) {
		r := mustAnswer(t, l.pod1, "tcp", "", "172.30.0.16:80")
		if r.server != "pod1" || r.client == l.pod1IP {
			t.Errorf("got %+v, want pod1 reaching itself, masqueraded", r)
		}
	})
	t.Run("endpoint removal", func(t *testing.T) {
		c.setEndpoints("web", local)
		if err := dp.Sync(ctx, c.build()); err != nil {
			t.Fatal(err)
		}
		if st := dp.LastSync(); st.Full {
			t.Errorf("endpoint removal was a full sync")
		}
		// Earlier subtests left UDP conntrack entries towards pod2, and a
		// new client socket may reuse one's source port; flushing them is
		// the proxy's conntrack cleanup, not the rules' job (see
		// dataplane/conntrack), so do here what the proxy does after a sync.
		if out, err := l.node.Run("conntrack", "-D", "-p", "udp", "--reply-src", l.pod2IP); err != nil && !strings.Contains(out, "0 flow entries") {
			t.Fatalf("conntrack -D: %v", err)
		}
		for _, proto := range []string{"tcp", "udp"} {
			if got := servers(answers(t, l.node, proto, "", "172.30.0.10:80", 30)); !slices.Equal(got, []string{"pod1"}) {
				t.Errorf("%s: answered by %v after removing pod2", proto, got)
			}
		}
	})
	t.Run("new service by partial sync", func(t *testing.T) {
		c.service(l, "late", "172.30.0.17", 30120, nil, remote)
		if err := dp.Sync(ctx, c.build()); err != nil {
			t.Fatal(err)
		}
		if r := mustAnswer(t, l.client, "tcp", l.clientIP, hostPort(l.nodeIP, 30120)); r.server != "pod2" {
			t.Errorf("answered by %s", r.server)
		}
		c.setEndpoints("late")
		if err := dp.Sync(ctx, c.build()); err != nil {
			t.Fatal(err)
		}
		if _, err := dial(l.node, "tcp", "", "172.30.0.17:80", dialTimeout); !refused(err) {
			t.Errorf("after losing its endpoints: %v, want refused", err)
		}
	})
	t.Run("kernel equals a fresh render", func(t *testing.T) {
		// After all these partial syncs, a new namespace given the same
		// State by one full sync must hold the very same rules.
		other := netns.New(t, "fresh")
		fresh := newNSDataplane(t, other, Config{})
		st := c.build()
		if err := dp.Sync(ctx, st); err != nil {
			t.Fatal(err)
		}
		if err := fresh.Sync(ctx, st); err != nil {
			t.Fatal(err)
		}
		want, got := kernelRules(t, other, false), kernelRules(t, l.node, false)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("kernel after partial syncs differs from a fresh full sync (-fresh +partial):\n%s", diff)
		}
	})
}

// kernelRules returns, per table and chain, the rules iptables-save lists
// in ns.
func kernelRules(t *testing.T, ns *netns.NS, v6 bool) map[string][]string {
	t.Helper()
	if v6 {
		return savedRules(t, ns, "ip6tables-save")
	}
	return savedRules(t, ns, "iptables-save")
}

// savedRules lists the filter and nat rules by "table chain" through the
// save command given (iptables-save, iptables-legacy-save, ...).
func savedRules(t *testing.T, ns *netns.NS, save string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, table := range []string{"filter", "nat"} {
		for _, line := range strings.Split(ns.MustRun(save, "-t", table), "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				name, _, _ := strings.Cut(line[1:], " ")
				out[table+" "+name] = append(out[table+" "+name], []string{}...)
			case strings.HasPrefix(line, "-A "):
				name, rule, _ := strings.Cut(line[3:], " ")
				out[table+" "+name] = append(out[table+" "+name], rule)
			}
		}
	}
	return out
}
