package userspace

import (
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
)

var (
	redirectPort = regexp.MustCompile(`(--to-ports |--on-port |--to-destination :)\d+`)
	// guardPort is the forwarder's port in a rule of the guard chain.
	guardPort = regexp.MustCompile(`("forwarder of [^"]*" (?:-d \S+ )?-p \w+ -m \w+ --dport )\d+`)
)

// restores returns the restore inputs fake received after the first
// skip, with the forwarders' ports blanked.
func restores(fake *xtables.FakeRunner, skip int) []string {
	var out []string
	for _, r := range fake.Restores()[skip:] {
		out = append(out, blankPorts(string(r)))
	}
	return out
}

// blankPorts replaces the forwarders' ports in rules with P.
func blankPorts(rules string) string {
	return guardPort.ReplaceAllString(redirectPort.ReplaceAllString(rules, "${1}P"), "${1}P")
}

// TestRedirectSyncWritesOnlyChanges checks the rules of redirect mode: a
// first Sync writes the chains, the guard of every forwarder's port
// (loopback's for a service address, every address's for a node port)
// included, an endpoint change writes nothing, a service losing its
// endpoints swaps its diversions for a REJECT, and a removed service
// takes its rule along.
func TestRedirectSyncWritesOnlyChanges(t *testing.T) {
	requireTransparent(t)
	bk := newBackends(t)
	c := newCluster()
	web := c.service("web", "10.96.0.10", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	c.service("dns", "10.96.0.11", nil, "dns/UDP/53")
	c.endpoints("dns", []string{"10.0.0.1"}, "dns/UDP/53")
	fake := xtables.NewFakeRunner()
	routing := &FakePolicyRouting{}
	d := newDataplane(t, bk, Config{Redirect: &RedirectConfig{Runner: fake, Routing: routing}})

	steps := []struct {
		name   string
		change func()
		want   []string
	}{{
		name:   "first sync",
		change: func() {},
		want: []string{"*nat\n" +
			":PKU-SERVICES - [0:0]\n" +
			":PKU-NODEPORTS - [0:0]\n" +
			"-A PKU-SERVICES -m addrtype --dst-type LOCAL -j PKU-NODEPORTS\n" +
			"-A PKU-NODEPORTS -d 127.0.0.0/8 -j RETURN\n" +
			`-A PKU-NODEPORTS -m comment --comment "ns/web:http node port" -p tcp -m tcp --dport 30080 -j DNAT --to-destination :P` + "\n" +
			`-I PKU-SERVICES 1 -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports P` + "\n" +
			`-I PKU-SERVICES 1 -m comment --comment "ns/dns:dns cluster IP" -d 10.96.0.11/32 -p udp -m udp --dport 53 -j REDIRECT --to-ports P` + "\n" +
			"COMMIT\n" +
			"*mangle\n" +
			":PKU-TPROXY - [0:0]\n" +
			":PKU-FIREWALL - [0:0]\n" +
			`-A PKU-TPROXY -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j TPROXY --on-port P --on-ip 10.96.0.10 --tproxy-mark 0x2000/0x2000` + "\n" +
			`-A PKU-TPROXY -m comment --comment "ns/dns:dns cluster IP" -d 10.96.0.11/32 -p udp -m udp --dport 53 -j TPROXY --on-port P --on-ip 10.96.0.11 --tproxy-mark 0x2000/0x2000` + "\n" +
			"COMMIT\n" +
			"*filter\n" +
			":PKU-REJECT - [0:0]\n" +
			":PKU-FORWARDERS - [0:0]\n" +
			"-A PKU-FORWARDERS -m conntrack --ctstate DNAT -j RETURN\n" +
			`-A PKU-FORWARDERS -m comment --comment "forwarder of cluster IP 10.96.0.11:53/UDP" -d 127.0.0.1/32 -p udp -m udp --dport P -j REJECT` + "\n" +
			`-A PKU-FORWARDERS -m comment --comment "forwarder of cluster IP 10.96.0.10:80/TCP" -d 127.0.0.1/32 -p tcp -m tcp --dport P -j REJECT --reject-with tcp-reset` + "\n" +
			`-A PKU-FORWARDERS -m comment --comment "forwarder of node port 30080/TCP" -p tcp -m tcp --dport P -j REJECT --reject-with tcp-reset` + "\n" +
			"COMMIT\n",
			// The jumps, in one more restore.
			"*nat\n" +
				`-I OUTPUT 1 -m comment --comment "proxykit userspace redirects" -j PKU-SERVICES` + "\n" +
				`-I PREROUTING 1 -m addrtype --dst-type LOCAL -m comment --comment "proxykit userspace redirects" -j PKU-NODEPORTS` + "\n" +
				"COMMIT\n" +
				"*mangle\n" +
				`-I OUTPUT 1 -m comment --comment "proxykit userspace redirects" -j PKU-FIREWALL` + "\n" +
				`-I PREROUTING 1 -m comment --comment "proxykit userspace redirects" -j PKU-FIREWALL` + "\n" +
				`-I PREROUTING 1 -m comment --comment "proxykit userspace redirects" -j PKU-TPROXY` + "\n" +
				"COMMIT\n" +
				"*filter\n" +
				`-I FORWARD 1 -m comment --comment "proxykit userspace redirects" -j PKU-REJECT` + "\n" +
				`-I INPUT 1 -m comment --comment "proxykit userspace redirects" -j PKU-REJECT` + "\n" +
				`-I INPUT 1 -m conntrack --ctstate NEW -m comment --comment "proxykit userspace redirects" -j PKU-FORWARDERS` + "\n" +
				`-I OUTPUT 1 -m comment --comment "proxykit userspace redirects" -j PKU-REJECT` + "\n" +
				"COMMIT\n"},
	}, {
		name:   "an endpoint change",
		change: func() { c.endpoints("web", []string{"10.0.0.2"}, "http/TCP/8080") },
	}, {
		name:   "no endpoints",
		change: func() { c.endpoints("web", nil, "http/TCP/8080") },
		want: []string{"*nat\n" +
			`-D PKU-NODEPORTS -m comment --comment "ns/web:http node port" -p tcp -m tcp --dport 30080 -j DNAT --to-destination :P` + "\n" +
			`-D PKU-SERVICES -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports P` + "\n" +
			"COMMIT\n" +
			"*mangle\n" +
			`-D PKU-TPROXY -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j TPROXY --on-port P --on-ip 10.96.0.10 --tproxy-mark 0x2000/0x2000` + "\n" +
			"COMMIT\n" +
			"*filter\n" +
			`-A PKU-REJECT -m comment --comment "ns/web:http node port" -m addrtype --dst-type LOCAL -p tcp -m tcp --dport 30080 -j REJECT` + "\n" +
			`-A PKU-REJECT -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REJECT` + "\n" +
			`-D PKU-FORWARDERS -m comment --comment "forwarder of cluster IP 10.96.0.10:80/TCP" -d 127.0.0.1/32 -p tcp -m tcp --dport P -j REJECT --reject-with tcp-reset` + "\n" +
			`-D PKU-FORWARDERS -m comment --comment "forwarder of node port 30080/TCP" -p tcp -m tcp --dport P -j REJECT --reject-with tcp-reset` + "\n" +
			"COMMIT\n"},
	}, {
		name:   "service removed",
		change: func() { c.b.UpdateService(web, nil) },
		want: []string{"*filter\n" +
			`-D PKU-REJECT -m comment --comment "ns/web:http node port" -m addrtype --dst-type LOCAL -p tcp -m tcp --dport 30080 -j REJECT` + "\n" +
			`-D PKU-REJECT -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REJECT` + "\n" +
			"COMMIT\n"},
	}}
	for _, s := range steps {
		seen := len(fake.Restores())
		s.change()
		mustSync(t, d, c.build())
		got := restores(fake, seen)
		for i := range got {
			got[i] = sortRuleLines(got[i])
		}
		for i := range s.want {
			s.want[i] = sortRuleLines(s.want[i])
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("%s: restore input (-want +got):\n%s", s.name, diff)
		}
	}

	want := []PolicyRoute{{Family: v1.IPv4Protocol, Mark: DefaultTProxyMark, Table: DefaultRouteTable, Priority: DefaultRulePriority}}
	if diff := cmp.Diff(want, routing.Installed()); diff != "" {
		t.Errorf("policy routes (-want +got):\n%s", diff)
	}
	if err := d.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := routing.Installed(); len(got) > 0 {
		t.Errorf("after Cleanup, policy routes %v", got)
	}
	for _, table := range []string{"nat", "mangle", "filter"} {
		save, err := fake.Save(t.Context(), table)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(save), "PKU-") {
			t.Errorf("after Cleanup, %s holds:\n%s", table, save)
		}
	}
}

// sortRuleLines orders the rule lines of each table, which follow map
// order within one restore.
func sortRuleLines(in string) string {
	var out, rules []string
	flush := func() {
		slices.Sort(rules)
		out = append(out, rules...)
		rules = nil
	}
	for _, l := range strings.Split(in, "\n") {
		if strings.HasPrefix(l, "-I ") || strings.HasPrefix(l, "-D ") || (strings.HasPrefix(l, "-A ") && strings.Contains(l, "comment")) {
			rules = append(rules, l)
			continue
		}
		flush()
		out = append(out, l)
	}
	flush()
	return strings.Join(out, "\n")
}

// requireTransparent skips t without CAP_NET_ADMIN, which redirect mode's
// transparent sockets need.
func requireTransparent(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("redirect mode's sockets are transparent (IP_TRANSPARENT), which needs CAP_NET_ADMIN: run as root")
	}
}

// TestRedirectDrops checks that redirect mode drops in the kernel what
// the model drops, ahead of any diversion: a cluster IP whose internal
// traffic policy finds no local endpoint, external traffic to a Local
// service without local endpoints (pods of the cluster CIDR and the node
// itself are served), and sources outside a VIP's source ranges.
func TestRedirectDrops(t *testing.T) {
	requireTransparent(t)
	c := newClusterWith(dataplane.Settings{LocalDetector: dataplane.LocalDetector{
		Mode: dataplane.LocalModeClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")},
	}})
	local := v1.ServiceInternalTrafficPolicyLocal
	c.service("itp", "10.96.0.20", func(s *v1.Service) { s.Spec.InternalTrafficPolicy = &local }, "http/TCP/80")
	c.endpoints("itp", []string{"10.0.0.1"}, "http/TCP/8080")
	c.service("lb", "10.96.0.21", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30081
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", "2001:db8::/64"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.7"}}
	}, "http/TCP/80")
	c.endpoints("lb", []string{"10.0.0.1"}, "http/TCP/8080")
	fake := xtables.NewFakeRunner()
	d := newDataplane(t, newBackends(t), Config{Redirect: &RedirectConfig{Runner: fake, Routing: &FakePolicyRouting{}}})
	s := c.build()
	mustSync(t, d, s)

	external := "! -s 10.0.0.0/16 -m addrtype ! --src-type LOCAL -j DROP"
	want := []string{
		`-m comment --comment "ns/itp:http cluster IP" -d 10.96.0.20/32 -p tcp -m tcp --dport 80 -j DROP`,
		`-m comment --comment "ns/lb:http load balancer IP" -d 203.0.113.7/32 -p tcp -m tcp --dport 80 ` + external,
		`-m comment --comment "ns/lb:http load balancer IP" -d 203.0.113.7/32 -p tcp -m tcp --dport 80 -s 192.0.2.0/24 -j RETURN`,
		`-m comment --comment "ns/lb:http load balancer IP" -d 203.0.113.7/32 -p tcp -m tcp --dport 80 -j DROP`,
		`-m comment --comment "ns/lb:http node port" -m addrtype --dst-type LOCAL -p tcp -m tcp --dport 30081 ` + external,
	}
	rules, _, err := fake.ListChain(t.Context(), "mangle", "PKU-FIREWALL")
	if err != nil {
		t.Fatal(err)
	}
	for i := range rules {
		rules[i] = strings.TrimPrefix(rules[i], "-A PKU-FIREWALL ")
	}
	slices.Sort(want)
	slices.Sort(rules)
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("PKU-FIREWALL (-want +got):\n%s", diff)
	}
}
