package userspace_test

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	dt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/userspace"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/servicemodel"
	"github.com/proxykit/proxykit/troubleshoot"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// readingState is the State the reading is checked against: default/web,
// a LoadBalancer at 5.6.7.8 with a source range, port http 80/TCP and
// node port 30080, with an endpoint on this node and one on another; and
// default/db, a ClusterIP service at 172.30.0.20:5432 with one endpoint on
// another node.
func readingState(t *testing.T) *dataplane.State {
	t.Helper()
	web := dt.MakeService("default", "web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.10", []string{"172.30.0.10"}
		s.Spec.Ports = []v1.ServicePort{dt.ServicePort("http", v1.ProtocolTCP, 80, 30080, 8080)}
		s.Spec.LoadBalancerSourceRanges = []string{dt.LBSourceRange}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.6.7.8"}}
	})
	db := dt.MakeService("default", "db", func(s *v1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.20", []string{"172.30.0.20"}
		s.Spec.Ports = []v1.ServicePort{dt.ServicePort("", v1.ProtocolTCP, 5432, 0, 0)}
	})
	slice := func(name string, port discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
		return dt.MakeSlice("default", name, 1, func(s *discovery.EndpointSlice) {
			s.Ports, s.Endpoints = []discovery.EndpointPort{port}, eps
		})
	}
	_, st := dt.Scenario{
		Name:     t.Name(),
		Services: []*v1.Service{web, db},
		Slices: []*discovery.EndpointSlice{
			slice("web", dt.SlicePort("http", v1.ProtocolTCP, 8080), dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.7", "node-b")),
			slice("db", dt.SlicePort("", v1.ProtocolTCP, 5432), dt.ReadyEndpoint("10.1.0.30", "node-b")),
		},
		Node:     dt.TestNode(nil),
		Settings: dt.DefaultSettings(),
	}.Build(t)
	return st
}

// redirected syncs s into a userspace dataplane in redirect mode over a
// fake iptables and a fake policy route (its forwarders listen on free
// ports of this machine, transparently, which needs root) and returns the
// nat, filter and mangle tables as iptables-save would list them.
func redirected(t *testing.T, s *dataplane.State) string {
	t.Helper()
	netns.Require(t)
	fake := xtables.NewFakeRunner()
	d, err := userspace.New(userspace.Config{Redirect: &userspace.RedirectConfig{Runner: fake, Routing: &userspace.FakePolicyRouting{}}, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Cleanup(t.Context()) })
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	var save []byte
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, err := fake.Save(t.Context(), table)
		if err != nil {
			t.Fatal(err)
		}
		save = append(save, out...)
	}
	return string(save)
}

// withoutLines deletes the lines of a listing that match re.
func withoutLines(re string) func(string) string {
	return func(s string) string { return regexp.MustCompile(`(?m)^.*`+re+`.*\n`).ReplaceAllString(s, "") }
}

// withLine inserts line after the first line header of a listing.
func withLine(header, line string) func(string) string {
	return func(s string) string { return strings.Replace(s, header+"\n", header+"\n"+line+"\n", 1) }
}

// redirectRule is a rule sending a frontend's packets to a forwarder: a
// REDIRECT or a DNAT of the port alone (to any address of the node at
// that port), or a TPROXY (to its --on-ip and --on-port).
var redirectRule = regexp.MustCompile(`(?m)^-A .*"([^ ]+) ([^"]+)".* -p (tcp|udp).* (?:--to-ports |--to-destination :|--on-port )(\d+)(?: --on-ip ([^ ]+))?( |$)`)

// listeningOn is Reading.Listening for the forwarders save sends
// packets to, less those of the frontends closed names ("ns/name:port
// kind").
func listeningOn(save string, closed ...string) func(v1.Protocol, netip.AddrPort) bool {
	var open userspace.ListeningSockets
	for _, m := range redirectRule.FindAllStringSubmatch(save, -1) {
		if strings.Contains(strings.Join(closed, "\n"), m[1]+" "+m[2]) {
			continue
		}
		addr := netip.IPv4Unspecified()
		if m[5] != "" {
			addr = netip.MustParseAddr(m[5])
		}
		port, _ := strconv.ParseUint(m[4], 10, 16)
		open.Add(v1.Protocol(strings.ToUpper(m[3])), netip.AddrPortFrom(addr, uint16(port)))
	}
	return open.Listening
}

// shadowed is the drift of another program's redirect to port 15001
// deciding first at the frontends of pn.
func shadowed(pn servicemodel.PortName, frontends ...string) []troubleshoot.Mismatch {
	var out []troubleshoot.Mismatch
	for _, fe := range frontends {
		out = append(out, troubleshoot.Mismatch{Service: pn, Kind: troubleshoot.Shadowed, Frontend: fe, Kernel: "DNAT to 0.0.0.0:15001",
			Detail: "a rule that is not the proxy's decides first: DNAT to 0.0.0.0:15001"})
	}
	return out
}

func TestReadingVerify(t *testing.T) {
	base := readingState(t)
	webHTTP := dt.PortName("default", "web", "http", v1.ProtocolTCP)
	save := redirected(t, base)
	cluster := "172.30.0.10:80/TCP (cluster IP) from 198.51.100.7"
	cases := []struct {
		name      string
		edit      func(string) string
		listening func(string) func(v1.Protocol, netip.AddrPort) bool
		want      []troubleshoot.Mismatch
	}{{
		name: "in sync",
	}, {
		name:      "in sync, every forwarder listening",
		listening: func(s string) func(v1.Protocol, netip.AddrPort) bool { return listeningOn(s) },
	}, {
		// Traffic entering the node for a service address is TPROXYed in
		// mangle.
		name: "cluster IP TPROXY deleted",
		edit: withoutLines(`-A PKU-TPROXY .*default/web:http cluster IP`),
		want: []troubleshoot.Mismatch{{Service: webHTTP, Kind: troubleshoot.Missing, Frontend: cluster,
			Model: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", Kernel: "not a service",
			Detail: "no rule of the proxy matches; the model says DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)"}},
	}, {
		// The nat REDIRECT serves the node's own traffic, which troubleshoot.Verify does
		// not probe (TestReadingTraceSteps follows it).
		name: "cluster IP REDIRECT deleted",
		edit: withoutLines(`-A PKU-SERVICES .*default/web:http cluster IP`),
	}, {
		// TPROXY finds no socket: the kernel drops the packet.
		name:      "the forwarder is gone",
		listening: func(s string) func(v1.Protocol, netip.AddrPort) bool { return listeningOn(s, "default/db cluster IP") },
		want: []troubleshoot.Mismatch{{Service: dt.PortName("default", "db", "", v1.ProtocolTCP), Kind: troubleshoot.WrongVerdict,
			Frontend: "172.30.0.20:5432/TCP (cluster IP) from 198.51.100.7", Kernel: "drop",
			Detail: "the model says DNAT to 10.1.0.30:5432 (masquerade), the rules drop"}},
	}, {
		// The LoadBalancer IP's transparent socket on the same port does
		// not take the cluster IP's packets.
		name: "the cluster IP's forwarder is gone, the load balancer IP's listens",
		listening: func(s string) func(v1.Protocol, netip.AddrPort) bool {
			return listeningOn(s, "default/web:http cluster IP")
		},
		want: []troubleshoot.Mismatch{{Service: webHTTP, Kind: troubleshoot.WrongVerdict, Frontend: cluster, Kernel: "drop",
			Detail: "the model says DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade), the rules drop"}},
	}, {
		// A node port's packet is DNATed to the forwarder's port: the
		// kernel refuses the connection.
		name: "the node port's forwarder is gone",
		listening: func(s string) func(v1.Protocol, netip.AddrPort) bool {
			return listeningOn(s, "default/web:http node port")
		},
		want: func() []troubleshoot.Mismatch {
			var out []troubleshoot.Mismatch
			for _, fe := range []string{"192.168.0.2:30080/TCP (node port) from 198.51.100.7", "192.168.1.2:30080/TCP (node port) from 198.51.100.7"} {
				out = append(out, troubleshoot.Mismatch{Service: webHTTP, Kind: troubleshoot.WrongVerdict, Frontend: fe, Kernel: "reject",
					Detail: "the model says DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade), the rules reject"})
			}
			return out
		}(),
	}, {
		// A nat redirect in PREROUTING comes after mangle's TPROXY: it
		// decides for the node ports alone.
		name: "another program's redirect first",
		edit: withLine("*nat", "-A PREROUTING -p tcp -j REDIRECT --to-ports 15001"),
		want: shadowed(webHTTP, "192.168.0.2:30080/TCP (node port) from 198.51.100.7", "192.168.1.2:30080/TCP (node port) from 198.51.100.7"),
	}, {
		// A TPROXY first in mangle PREROUTING, ahead of the proxy's drops,
		// decides for every frontend.
		name: "another program's TPROXY first",
		edit: withLine("*mangle", "-A PREROUTING -p tcp -j TPROXY --on-port 15001 --tproxy-mark 0x1/0x1"),
		want: append(shadowed(dt.PortName("default", "db", "", v1.ProtocolTCP), "172.30.0.20:5432/TCP (cluster IP) from 198.51.100.7"),
			shadowed(webHTTP, cluster, "192.168.0.2:30080/TCP (node port) from 198.51.100.7", "192.168.1.2:30080/TCP (node port) from 198.51.100.7",
				"5.6.7.8:80/TCP (load balancer IP) from 198.51.100.7", "5.6.7.8:80/TCP (load balancer IP) from 203.0.113.0")...),
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := save
			if tc.edit != nil {
				s = tc.edit(s)
			}
			k := &userspace.Reading{IPTables: xtables.NewReading([]byte(s), base.Node.IPs), Model: base}
			if len(k.IPTables.Skipped) > 0 {
				t.Fatalf("skipped %v", k.IPTables.Skipped)
			}
			if tc.listening != nil {
				k.Listening = tc.listening(s)
			}
			got := troubleshoot.Verify(base, "userspace", k)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(troubleshoot.Mismatch{}, "Model")); diff != "" {
				t.Errorf("troubleshoot.Verify (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadingTraceSteps follows packets from a pod and from the node
// through the rules and to the forwarders: a pod's packet to a cluster IP
// is TPROXYed in mangle to the socket on the cluster IP itself, the
// node's is redirected in nat, and each way fails in its own manner
// without its rule or its socket (another address's socket on the same
// port does not stand in for it).
func TestReadingTraceSteps(t *testing.T) {
	base := readingState(t)
	webHTTP, dbPort := dt.PortName("default", "web", "http", v1.ProtocolTCP), dt.PortName("default", "db", "", v1.ProtocolTCP)
	save := redirected(t, base)
	packet := func(from dataplane.Origin, src, dst string) dataplane.Packet {
		return dataplane.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddrPort(dst), Protocol: v1.ProtocolTCP, From: from}
	}
	fromPod := packet(dataplane.FromLocalPod, "10.0.0.9", "172.30.0.10:80")
	fromNode := packet(dataplane.FromNode, "192.168.0.2", "172.30.0.10:80")
	nodePort := packet(dataplane.FromOutside, "198.51.100.7", "192.168.0.2:30080")
	type result struct {
		Verdict string
		Service servicemodel.PortName
		// Via is the target of the proxy's rule that sent the packet on
		// (TPROXY, REDIRECT, DNAT), "" for none.
		Via string
		// Then is the step of the socket it reached: a TPROXY's at the
		// service's address and port, a REDIRECT's or DNAT's at a free
		// port of this machine, written P.
		Then string
	}
	const forwarder = "forwarder of default/web:http/TCP on port P: routes as the model does"
	cases := []struct {
		name   string
		edit   func(string) string
		closed string
		p      dataplane.Packet
		want   result
	}{{
		name: "pod to cluster IP",
		p:    fromPod,
		want: result{"DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", webHTTP, "TPROXY", "forwarder of default/web:http/TCP on 172.30.0.10:80: routes as the model does"},
	}, {
		name: "node to cluster IP",
		p:    fromNode,
		want: result{"DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", webHTTP, "REDIRECT", forwarder},
	}, {
		name: "node port",
		p:    nodePort,
		want: result{"DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", webHTTP, "DNAT", forwarder},
	}, {
		name: "pod to cluster IP, TPROXY deleted",
		edit: withoutLines(`-A PKU-TPROXY .*default/web:http cluster IP`),
		p:    fromPod,
		want: result{Verdict: "not a service"},
	}, {
		name: "node to cluster IP, REDIRECT deleted",
		edit: withoutLines(`-A PKU-SERVICES .*default/web:http cluster IP`),
		p:    fromNode,
		want: result{Verdict: "not a service"},
	}, {
		name:   "pod to cluster IP, forwarder gone",
		closed: "default/db cluster IP",
		p:      packet(dataplane.FromLocalPod, "10.0.0.9", "172.30.0.20:5432"),
		want:   result{"drop", dbPort, "TPROXY", "no transparent socket of the node listens on TCP 172.30.0.20:5432: the kernel drops the packet"},
	}, {
		name:   "pod to cluster IP, its forwarder gone, the load balancer IP's on the same port listening",
		closed: "default/web:http cluster IP",
		p:      fromPod,
		want:   result{"drop", webHTTP, "TPROXY", "no transparent socket of the node listens on TCP 172.30.0.10:80: the kernel drops the packet"},
	}, {
		name:   "load balancer IP, the cluster IP's forwarder gone",
		closed: "default/web:http cluster IP",
		p:      packet(dataplane.FromOutside, "203.0.113.5", "5.6.7.8:80"),
		want:   result{"DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", webHTTP, "TPROXY", "forwarder of default/web:http/TCP on 5.6.7.8:80: routes as the model does"},
	}, {
		name:   "node to cluster IP, forwarder gone",
		closed: "default/db cluster IP",
		p:      packet(dataplane.FromNode, "192.168.0.2", "172.30.0.20:5432"),
		want:   result{"reject", dbPort, "REDIRECT", "no socket of the node listens on TCP port P: the kernel refuses the connection"},
	}, {
		name:   "node port, forwarder gone",
		closed: "default/web:http node port",
		p:      nodePort,
		want:   result{"reject", webHTTP, "DNAT", "no socket of the node listens on TCP port P: the kernel refuses the connection"},
	}}
	target := regexp.MustCompile(`^(?:mangle|nat) PKU-\w+: .* -j (TPROXY|REDIRECT|DNAT) `)
	rule := regexp.MustCompile(`^(?:mangle|nat|filter) `)
	port := regexp.MustCompile(`port \d+`)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := save
			if tc.edit != nil {
				s = tc.edit(s)
			}
			k := &userspace.Reading{IPTables: xtables.NewReading([]byte(s), base.Node.IPs), Model: base, Listening: listeningOn(s, tc.closed)}
			v, steps, err := k.TraceSteps(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			got := result{Verdict: troubleshoot.Summary(v), Service: v.Service}
			for _, step := range steps {
				if m := target.FindStringSubmatch(step); m != nil {
					got.Via = m[1]
				}
			}
			if n := len(steps); n > 0 && !rule.MatchString(steps[n-1]) {
				got.Then = port.ReplaceAllString(steps[n-1], "port P")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("TraceSteps (-want +got):\n%s\nsteps:\n%s", diff, strings.Join(steps, "\n"))
			}
		})
	}
}
