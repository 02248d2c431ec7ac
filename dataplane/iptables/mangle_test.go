package iptables

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// The userspace dataplane's interception in mangle: a firewall hooked
// from PREROUTING and OUTPUT, TPROXY rules from PREROUTING only, and its
// REDIRECTs for the node's own traffic in nat OUTPUT.
const (
	tproxyMangle4 = `*mangle
:PKU-FIREWALL - [0:0]
:PKU-TPROXY - [0:0]
:PKU-TPROXY-NODEPORTS - [0:0]
:PKU-XSVC - [0:0]
-A PREROUTING -j PKU-FIREWALL
-A PREROUTING -j PKU-TPROXY
-A OUTPUT -j PKU-FIREWALL
-A PKU-FIREWALL -m comment --comment "ns/web:http load balancer IP" -d 1.2.3.4/32 -p tcp -m tcp --dport 80 -s 10.0.0.0/8 -j RETURN
-A PKU-FIREWALL -m comment --comment "ns/web:http load balancer IP" -d 1.2.3.4/32 -p tcp -m tcp --dport 80 -j DROP
-A PKU-FIREWALL -m comment --comment "ns/int:http external IP" -d 5.6.7.8/32 -p tcp -m tcp --dport 80 ! -s 10.244.0.0/16 -m addrtype ! --src-type LOCAL -j DROP
-A PKU-FIREWALL -m comment --comment "ns/pods:http external IP" -d 9.9.9.9/32 -p tcp -m tcp --dport 80 ! -i cbr0 -j DROP
-A PKU-TPROXY -i lo -j RETURN
-A PKU-TPROXY -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j TPROXY --on-port 41234 --on-ip 0.0.0.0 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -m comment --comment "ns/web:http load balancer IP" -d 1.2.3.4/32 -p tcp -m tcp --dport 80 -j TPROXY --on-port 41234 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -m comment --comment "ns/int:http external IP" -d 5.6.7.8/32 -p tcp -m tcp --dport 80 -j TPROXY --on-port 41236 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -m comment --comment "ns/blocked:http cluster IP" -d 10.96.0.40/32 -p tcp -m tcp --dport 80 -j TPROXY --on-port 41237 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -m comment --comment "ns/dns:dns node port" -m addrtype --dst-type LOCAL -p udp -m udp --dport 30053 -j TPROXY --on-port 41235 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -m comment --comment "ns/svc:p cluster IP" -d 10.96.0.50/32 -p tcp -m tcp --dport 80 -j PKU-XSVC
-A PKU-TPROXY -m addrtype --dst-type LOCAL -j PKU-TPROXY-NODEPORTS
-A PKU-TPROXY-NODEPORTS -d 127.0.0.0/8 -j RETURN
-A PKU-TPROXY-NODEPORTS -m comment --comment "ns/web:http node port" -p tcp -m tcp --dport 30080 -j TPROXY --on-port 0 --tproxy-mark 0x200000/0x200000
-A PKU-XSVC -p tcp -m tcp --dport 80 -j TPROXY --on-port 41238
COMMIT
*nat
:PKU-SERVICES - [0:0]
:PKU-NODEPORTS - [0:0]
-A OUTPUT -j PKU-SERVICES
-A PREROUTING -m comment --comment "proxykit userspace redirects" -m addrtype --dst-type LOCAL -j PKU-NODEPORTS
-A PREROUTING -d 10.96.0.60/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination :8080
-A PKU-NODEPORTS -m comment --comment "ns/web:http node port" -p tcp -m tcp --dport 30081 -j DNAT --to-destination :41239
-A PKU-SERVICES -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 41234
COMMIT
*filter
:PKU-REJECT - [0:0]
-A INPUT -j PKU-REJECT
-A FORWARD -j PKU-REJECT
-A OUTPUT -j PKU-REJECT
-A INPUT -m comment --comment "ns/blocked:http cluster IP" -d 10.96.0.40/32 -p tcp -m tcp --dport 80 -j DROP
-A PKU-REJECT -m comment --comment "ns/none:http has no endpoints" -d 10.96.0.20/32 -p tcp -m tcp --dport 80 -j REJECT
COMMIT
`
	// The same as iptables-save 1.8 lists it (the chains' rules only).
	tproxyMangle4Saved = `*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:PKU-FIREWALL - [0:0]
:PKU-TPROXY - [0:0]
:PKU-TPROXY-NODEPORTS - [0:0]
:PKU-XSVC - [0:0]
-A PREROUTING -j PKU-FIREWALL
-A PREROUTING -j PKU-TPROXY
-A OUTPUT -j PKU-FIREWALL
-A PKU-FIREWALL -s 10.0.0.0/8 -d 1.2.3.4/32 -p tcp -m comment --comment "ns/web:http load balancer IP" -m tcp --dport 80 -j RETURN
-A PKU-FIREWALL -d 1.2.3.4/32 -p tcp -m comment --comment "ns/web:http load balancer IP" -m tcp --dport 80 -j DROP
-A PKU-FIREWALL ! -s 10.244.0.0/16 -d 5.6.7.8/32 -p tcp -m comment --comment "ns/int:http external IP" -m tcp --dport 80 -m addrtype ! --src-type LOCAL -j DROP
-A PKU-FIREWALL -d 9.9.9.9/32 ! -i cbr0 -p tcp -m comment --comment "ns/pods:http external IP" -m tcp --dport 80 -j DROP
-A PKU-TPROXY -i lo -j RETURN
-A PKU-TPROXY -d 10.96.0.10/32 -p tcp -m comment --comment "ns/web:http cluster IP" -m tcp --dport 80 -j TPROXY --on-port 41234 --on-ip 0.0.0.0 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -d 1.2.3.4/32 -p tcp -m comment --comment "ns/web:http load balancer IP" -m tcp --dport 80 -j TPROXY --on-port 41234 --on-ip 0.0.0.0 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -d 5.6.7.8/32 -p tcp -m comment --comment "ns/int:http external IP" -m tcp --dport 80 -j TPROXY --on-port 41236 --on-ip 0.0.0.0 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -d 10.96.0.40/32 -p tcp -m comment --comment "ns/blocked:http cluster IP" -m tcp --dport 80 -j TPROXY --on-port 41237 --on-ip 0.0.0.0 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -p udp -m comment --comment "ns/dns:dns node port" -m addrtype --dst-type LOCAL -m udp --dport 30053 -j TPROXY --on-port 41235 --on-ip 0.0.0.0 --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -d 10.96.0.50/32 -p tcp -m comment --comment "ns/svc:p cluster IP" -m tcp --dport 80 -j PKU-XSVC
-A PKU-TPROXY -m addrtype --dst-type LOCAL -j PKU-TPROXY-NODEPORTS
-A PKU-TPROXY-NODEPORTS -d 127.0.0.0/8 -j RETURN
-A PKU-TPROXY-NODEPORTS -p tcp -m comment --comment "ns/web:http node port" -m tcp --dport 30080 -j TPROXY --on-port 0 --on-ip 0.0.0.0 --tproxy-mark 0x200000/0x200000
-A PKU-XSVC -p tcp -m tcp --dport 80 -j TPROXY --on-port 41238 --on-ip 0.0.0.0 --tproxy-mark 0x0/0x0
COMMIT
`
	tproxyMangle6 = `*mangle
:PKU-FIREWALL - [0:0]
:PKU-TPROXY - [0:0]
-A PREROUTING -j PKU-FIREWALL
-A PREROUTING -j PKU-TPROXY
-A OUTPUT -j PKU-FIREWALL
-A PKU-FIREWALL -m comment --comment "ns/web:http load balancer IP" -d 2001:db8::4/128 -p tcp -m tcp --dport 80 -s fd00:10::/32 -j RETURN
-A PKU-FIREWALL -m comment --comment "ns/web:http load balancer IP" -d 2001:db8::4/128 -p tcp -m tcp --dport 80 -j DROP
-A PKU-FIREWALL -m comment --comment "ns/int:http external IP" -d 2001:db8::8/128 -p tcp -m tcp --dport 80 ! -s fd00:10::/32 -m addrtype ! --src-type LOCAL -j DROP
-A PKU-TPROXY -i lo -j RETURN
-A PKU-TPROXY -m comment --comment "ns/web:http cluster IP" -d fd00::10/128 -p tcp -m tcp --dport 80 -j TPROXY --on-port 41234 --on-ip :: --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -m comment --comment "ns/dns:dns node port" -m addrtype --dst-type LOCAL -p udp -m udp --dport 30053 -j TPROXY --on-port 41235 --on-ip ::1 --tproxy-mark 0x200000/0x200000
COMMIT
`
	tproxyMangle6Saved = `*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:PKU-FIREWALL - [0:0]
:PKU-TPROXY - [0:0]
-A PREROUTING -j PKU-FIREWALL
-A PREROUTING -j PKU-TPROXY
-A OUTPUT -j PKU-FIREWALL
-A PKU-FIREWALL -s fd00:10::/32 -d 2001:db8::4/128 -p tcp -m comment --comment "ns/web:http load balancer IP" -m tcp --dport 80 -j RETURN
-A PKU-FIREWALL -d 2001:db8::4/128 -p tcp -m comment --comment "ns/web:http load balancer IP" -m tcp --dport 80 -j DROP
-A PKU-FIREWALL ! -s fd00:10::/32 -d 2001:db8::8/128 -p tcp -m comment --comment "ns/int:http external IP" -m tcp --dport 80 -m addrtype ! --src-type LOCAL -j DROP
-A PKU-TPROXY -i lo -j RETURN
-A PKU-TPROXY -d fd00::10/128 -p tcp -m comment --comment "ns/web:http cluster IP" -m tcp --dport 80 -j TPROXY --on-port 41234 --on-ip :: --tproxy-mark 0x200000/0x200000
-A PKU-TPROXY -p udp -m comment --comment "ns/dns:dns node port" -m addrtype --dst-type LOCAL -m udp --dport 30053 -j TPROXY --on-port 41235 --on-ip ::1 --tproxy-mark 0x200000/0x200000
COMMIT
`
)

// restored returns a FakeRunner that restored input.
func restored(t *testing.T, input string) *xtables.FakeRunner {
	t.Helper()
	fake := xtables.NewFakeRunner()
	if err := fake.Restore(t.Context(), xtables.RestoreBytes(input)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return fake
}

// chainKeys returns the Keys of every rule of table, by chain.
func chainKeys(t *testing.T, rs *xtables.Ruleset, table string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, c := range rs.Chains(table) {
		for _, text := range rs.Rules(table, c) {
			k, ok := xtables.RuleKey(text)
			if !ok {
				t.Fatalf("cannot parse %s %s: %s", table, c, text)
			}
			out[c] = append(out[c], k)
		}
	}
	return out
}

// TestMangleRoundTrip: the mangle rules restore through the fake, list
// back (ListChain, Save) as written, and iptables-save's listing of them
// parses into rules that do the same.
func TestMangleRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name, input, saved string
	}{
		{"IPv4", tproxyMangle4, tproxyMangle4Saved},
		{"IPv6", tproxyMangle6, tproxyMangle6Saved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := restored(t, tc.input)
			mangle, _, _ := strings.Cut(tc.input, "COMMIT\n")
			var want []string
			for l := range strings.Lines(mangle) {
				if strings.HasPrefix(l, "-A PKU-TPROXY ") {
					want = append(want, strings.TrimSuffix(l, "\n"))
				}
			}
			got, ok, err := fake.ListChain(t.Context(), "mangle", "PKU-TPROXY")
			if err != nil || !ok {
				t.Fatalf("ListChain: %v, %v", ok, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ListChain (-want +got):\n%s", diff)
			}

			out, err := fake.Save(t.Context(), "mangle")
			if err != nil {
				t.Fatal(err)
			}
			again, skipped := xtables.ParseSave(out)
			if len(skipped) > 0 {
				t.Fatalf("Save's listing: skipped %v", skipped)
			}
			if diff := cmp.Diff(string(out), string(again.Save("mangle"))); diff != "" {
				t.Errorf("Save, xtables.ParseSave, Save (-first +second):\n%s", diff)
			}

			listed, skipped := xtables.ParseSave([]byte(tc.saved))
			if len(skipped) > 0 {
				t.Fatalf("iptables-save's listing: skipped %v", skipped)
			}
			if diff := cmp.Diff(chainKeys(t, fake.Ruleset(), "mangle"), chainKeys(t, listed, "mangle")); diff != "" {
				t.Errorf("keys (-restored +listed):\n%s", diff)
			}
		})
	}
}

// TestTproxyRejected: what iptables-restore refuses of TPROXY and its
// options and of a DNAT of the port alone, the fake refuses; it also
// refuses port 0 and 65536, which iptables 1.8.9 takes silently (65536
// as 0), as no renderer should write them.
func TestTproxyRejected(t *testing.T) {
	mangle := func(rules ...string) string {
		return "*mangle\n:X - [0:0]\n" + strings.Join(rules, "\n") + "\nCOMMIT\n"
	}
	const cip = "-d 10.96.0.10/32 "
	for _, tc := range []struct {
		name, input string
		want        *xtables.ParseError
	}{
		{"no -p", mangle("-A X " + cip + "-j TPROXY --on-port 1"),
			&xtables.ParseError{Line: 3, Msg: "TPROXY needs -p tcp or -p udp"}},
		{"-p sctp", mangle("-A X " + cip + "-p sctp -j TPROXY --on-port 1"),
			&xtables.ParseError{Line: 3, Msg: "TPROXY needs -p tcp or -p udp"}},
		{"no --on-port", mangle("-A X " + cip + "-p tcp -j TPROXY --on-ip 0.0.0.0"),
			&xtables.ParseError{Line: 3, Msg: "TPROXY needs --on-port"}},
		{"port out of range", mangle("-A X " + cip + "-p tcp -j TPROXY --on-port 65536"),
			&xtables.ParseError{Line: 3, Msg: `bad --on-port "65536": strconv.ParseUint: parsing "65536": value out of range`}},
		{"bad address", mangle("-A X " + cip + "-p tcp -j TPROXY --on-port 1 --on-ip 10.0.0.300"),
			&xtables.ParseError{Line: 3, Msg: `bad --on-ip "10.0.0.300": ParseAddr("10.0.0.300"): IPv4 field has value >255`}},
		{"address of the other family", mangle("-A X " + cip + "-p tcp -j TPROXY --on-port 1 --on-ip ::"),
			&xtables.ParseError{Line: 3, Msg: "--on-ip :: is not of the rule's family"}},
		{"bad mark", mangle("-A X " + cip + "-p tcp -j TPROXY --on-port 1 --tproxy-mark 0x1/x"),
			&xtables.ParseError{Line: 3, Msg: `bad --tproxy-mark "0x1/x": strconv.ParseUint: parsing "x": invalid syntax`}},
		{"--on-port on another target", mangle("-A X " + cip + "-p tcp -j ACCEPT --on-port 1"),
			&xtables.ParseError{Line: 3, Msg: "only TPROXY takes --on-port, --on-ip and --tproxy-mark"}},
		{"--tproxy-mark on MARK", mangle("-A X -j MARK --or-mark 0x1 --tproxy-mark 0x1"),
			&xtables.ParseError{Line: 3, Msg: "only TPROXY takes --on-port, --on-ip and --tproxy-mark"}},
		{"in nat", "*nat\n-A PREROUTING " + cip + "-p tcp -j TPROXY --on-port 1\nCOMMIT\n",
			&xtables.ParseError{Line: 2, Msg: "TPROXY is only valid in the mangle table, not nat"}},
		{"in filter", "*filter\n-A INPUT " + cip + "-p tcp -j TPROXY --on-port 1\nCOMMIT\n",
			&xtables.ParseError{Line: 2, Msg: "TPROXY is only valid in the mangle table, not filter"}},
		{"from OUTPUT", mangle("-A OUTPUT -j X", "-A X "+cip+"-p tcp -j TPROXY --on-port 1"),
			&xtables.ParseError{Line: 5, Msg: "TPROXY in X is reached from OUTPUT; it is only valid from PREROUTING"}},
		{"in INPUT", mangle("-A INPUT " + cip + "-p udp -j TPROXY --on-port 1"),
			&xtables.ParseError{Line: 4, Msg: "TPROXY in INPUT is reached from INPUT; it is only valid from PREROUTING"}},
		{"DNAT to port 0", "*nat\n-A PREROUTING -p tcp -j DNAT --to-destination :0\nCOMMIT\n",
			&xtables.ParseError{Line: 2, Msg: `bad port in --to-destination ":0"`}},
		{"DNAT to no port", "*nat\n-A PREROUTING -p tcp -j DNAT --to-destination :\nCOMMIT\n",
			&xtables.ParseError{Line: 2, Msg: `bad port in --to-destination ":"`}},
		{"negated protocol", mangle("-A X " + cip + "! -p tcp -j TPROXY --on-port 1"),
			&xtables.ParseError{Line: 3, Msg: "-p cannot be negated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := xtables.NewRuleset().Apply([]byte(tc.input))
			var got *xtables.ParseError
			if !errors.As(err, &got) {
				t.Fatalf("Apply: %v, want %v", err, tc.want)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestTraceMangle: the tracer follows mangle before nat. A firewall DROP
// is the verdict; a TPROXY sends the packet, unrewritten, to a socket of
// the node, as a REDIRECT does; the node's own packets meet mangle OUTPUT
// and then nat OUTPUT's REDIRECTs.
func TestTraceMangle(t *testing.T) {
	node := []netip.Addr{netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("2001:db8:1::2")}
	web := dataplanetest.PortName("ns", "web", "http", v1.ProtocolTCP)
	ext := dataplanetest.PortName("ns", "int", "http", v1.ProtocolTCP)
	pods := dataplanetest.PortName("ns", "pods", "http", v1.ProtocolTCP)
	dns := dataplanetest.PortName("ns", "dns", "dns", v1.ProtocolUDP)
	redirect := func(svc servicemodel.PortName, ep string) dataplane.Verdict {
		return dataplane.Verdict{Action: dataplane.DNAT, Service: svc, Endpoints: dataplanetest.AddrPorts(ep)}
	}
	via := func(p dataplane.Packet, iface string) dataplane.Packet { p.Interface = iface; return p }
	pkt := dataplanetest.MakePacket
	const tcp, udp = v1.ProtocolTCP, v1.ProtocolUDP
	const firewall, tproxy = "mangle PREROUTING: -j PKU-FIREWALL", "mangle PREROUTING: -j PKU-TPROXY"
	for _, tc := range []struct {
		name  string
		rules string
		p     dataplane.Packet
		want  dataplane.Verdict
		// steps, when set, are the whole TraceSteps.
		steps []string
	}{{
		name: "cluster IP from a pod", rules: tproxyMangle4,
		p:    pkt(dataplane.FromLocalPod, "10.244.1.5", "10.96.0.10:80", tcp),
		want: redirect(web, "0.0.0.0:41234"),
		steps: []string{firewall, tproxy, `mangle PKU-TPROXY: -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j TPROXY --on-port 41234 --on-ip 0.0.0.0 --tproxy-mark 0x200000/0x200000`,
			"filter INPUT: -j PKU-REJECT"},
	}, {
		name: "cluster IP from outside", rules: tproxyMangle4,
		p:    via(pkt(dataplane.FromOutside, "203.0.113.7", "10.96.0.10:80", tcp), "eth0"),
		want: redirect(web, "0.0.0.0:41234"),
	}, {
		name: "node port on a node IP", rules: tproxyMangle4,
		p:    pkt(dataplane.FromOutside, "203.0.113.7", "192.168.0.2:30053", udp),
		want: redirect(dns, "0.0.0.0:41235"),
	}, {
		name: "node port in the sub-chain, --on-port 0: the packet's own", rules: tproxyMangle4,
		p:    pkt(dataplane.FromOutside, "203.0.113.7", "192.168.0.2:30080", tcp),
		want: redirect(web, "0.0.0.0:30080"),
	}, {
		name: "the service named by the jump", rules: tproxyMangle4,
		p:    pkt(dataplane.FromLocalPod, "10.244.1.5", "10.96.0.50:80", tcp),
		want: redirect(dataplanetest.PortName("ns", "svc", "p", tcp), "0.0.0.0:41238"),
	}, {
		name: "node port DNATed by port alone", rules: tproxyMangle4,
		p:    pkt(dataplane.FromOutside, "203.0.113.7", "192.168.0.2:30081", tcp),
		want: redirect(web, "0.0.0.0:41239"),
	}, {
		name: "a remote destination DNATed by port alone", rules: tproxyMangle4,
		p:    pkt(dataplane.FromOutside, "203.0.113.7", "10.96.0.60:80", tcp),
		want: dataplane.Verdict{Action: dataplane.DNAT, Endpoints: dataplanetest.AddrPorts("10.96.0.60:8080")},
	}, {
		name: "node port on loopback returns", rules: tproxyMangle4,
		p:    pkt(dataplane.FromLocalPod, "10.244.1.5", "127.0.0.1:30080", tcp),
		want: dataplane.Verdict{Action: dataplane.NotAService},
	}, {
		name: "the node's own: mangle leaves it, nat OUTPUT redirects", rules: tproxyMangle4,
		p:    pkt(dataplane.FromNode, "192.168.0.2", "10.96.0.10:80", tcp),
		want: redirect(web, "0.0.0.0:41234"),
		steps: []string{"mangle OUTPUT: -j PKU-FIREWALL", "nat OUTPUT: -j PKU-SERVICES",
			`nat PKU-SERVICES: -m comment --comment "ns/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 41234`,
			"filter OUTPUT: -j PKU-REJECT"},
	}, {
		name: "firewall RETURN, then TPROXY", rules: tproxyMangle4,
		p:    pkt(dataplane.FromOutside, "10.1.2.3", "1.2.3.4:80", tcp),
		want: redirect(web, "0.0.0.0:41234"),
	}, {
		name: "firewall DROP", rules: tproxyMangle4,
		p:    pkt(dataplane.FromOutside, "203.0.113.7", "1.2.3.4:80", tcp),
		want: dataplane.Verdict{Action: dataplane.Drop, Service: web},
		steps: []string{firewall,
			`mangle PKU-FIREWALL: -m comment --comment "ns/web:http load balancer IP" -d 1.2.3.4/32 -p tcp -m tcp --dport 80 -j DROP`},
	}, {
		name: "firewall DROP of the node's own", rules: tproxyMangle4,
		p:    pkt(dataplane.FromNode, "192.168.0.2", "1.2.3.4:80", tcp),
		want: dataplane.Verdict{Action: dataplane.Drop, Service: web},
	}, {
		name: "! --src-type LOCAL: outside is dropped", rules: tproxyMangle4,
		p:    pkt(dataplane.FromOutside, "203.0.113.7", "5.6.7.8:80", tcp),
		want: dataplane.Verdict{Action: dataplane.Drop, Service: ext},
	}, {
		name: "! --src-type LOCAL: a pod is not", rules: tproxyMangle4,
		p:    pkt(dataplane.FromLocalPod, "10.244.1.5", "5.6.7.8:80", tcp),
		want: redirect(ext, "0.0.0.0:41236"),
	}, {
		name: "! --src-type LOCAL: the node is not", rules: tproxyMangle4,
		p:    pkt(dataplane.FromNode, "192.168.0.2", "5.6.7.8:80", tcp),
		want: dataplane.Verdict{Action: dataplane.NotAService},
	}, {
		name: "! -i cbr0: through the bridge", rules: tproxyMangle4,
		p:    via(pkt(dataplane.FromLocalPod, "10.244.1.5", "9.9.9.9:80", tcp), "cbr0"),
		want: dataplane.Verdict{Action: dataplane.NotAService},
	}, {
		name: "! -i cbr0: through another interface", rules: tproxyMangle4,
		p:    via(pkt(dataplane.FromOutside, "203.0.113.7", "9.9.9.9:80", tcp), "eth0"),
		want: dataplane.Verdict{Action: dataplane.Drop, Service: pods},
	}, {
		name: "! -i cbr0: the node's own has no input interface", rules: tproxyMangle4,
		p:    pkt(dataplane.FromNode, "192.168.0.2", "9.9.9.9:80", tcp),
		want: dataplane.Verdict{Action: dataplane.Drop, Service: pods},
	}, {
		name: "-i lo -j RETURN", rules: tproxyMangle4,
		p:     via(pkt(dataplane.FromOutside, "192.168.0.2", "10.96.0.10:80", tcp), "lo"),
		want:  dataplane.Verdict{Action: dataplane.NotAService},
		steps: []string{firewall, tproxy, "mangle PKU-TPROXY: -i lo -j RETURN", "filter FORWARD: -j PKU-REJECT"},
	}, {
		name: "filter INPUT sees the original destination", rules: tproxyMangle4,
		p:    pkt(dataplane.FromLocalPod, "10.244.1.5", "10.96.0.40:80", tcp),
		want: dataplane.Verdict{Action: dataplane.Drop, Service: dataplanetest.PortName("ns", "blocked", "http", tcp)},
	}, {
		name: "filter REJECT as before", rules: tproxyMangle4,
		p:    pkt(dataplane.FromLocalPod, "10.244.1.5", "10.96.0.20:80", tcp),
		want: dataplane.Verdict{Action: dataplane.Reject, Service: dataplanetest.PortName("ns", "none", "http", tcp)},
	}, {
		name: "IPv6 cluster IP from a pod", rules: tproxyMangle6,
		p:    pkt(dataplane.FromLocalPod, "fd00:10:244::5", "[fd00::10]:80", tcp),
		want: redirect(web, "[::]:41234"),
	}, {
		name: "IPv6 node port to an --on-ip", rules: tproxyMangle6,
		p:    pkt(dataplane.FromOutside, "2001:db8:9::7", "[2001:db8:1::2]:30053", udp),
		want: redirect(dns, "[::1]:41235"),
	}, {
		name: "IPv6 firewall RETURN, then nothing", rules: tproxyMangle6,
		p:    pkt(dataplane.FromLocalPod, "fd00:10:244::5", "[2001:db8::4]:80", tcp),
		want: dataplane.Verdict{Action: dataplane.NotAService},
	}, {
		name: "IPv6 firewall DROP", rules: tproxyMangle6,
		p:    pkt(dataplane.FromOutside, "2001:db8:9::7", "[2001:db8::8]:80", tcp),
		want: dataplane.Verdict{Action: dataplane.Drop, Service: ext},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rs := restored(t, tc.rules).Ruleset()
			v, steps := rs.TraceSteps(tc.p, node)
			if diff := dataplanetest.DiffVerdict(tc.want, v); diff != "" {
				t.Errorf("(-want +got):\n%s\nsteps: %q", diff, steps)
			}
			if tc.steps != nil {
				if diff := cmp.Diff(tc.steps, steps); diff != "" {
					t.Errorf("steps (-want +got):\n%s", diff)
				}
			}
		})
	}
}
