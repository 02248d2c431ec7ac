package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
)

// usNode is the node's manifest: its InternalIPs are the addresses on the
// client's link; the uplink's are its second addresses.
const usNode = `apiVersion: v1
kind: Node
metadata: {name: usnode}
status:
  addresses: [{type: InternalIP, address: 10.1.0.1}, {type: InternalIP, address: "fd00:1::1"}]
`

// usServices are one family's services, "<name>-<family>": web (cluster
// IP, node port, external IP and LoadBalancer IP), dns (UDP, node port),
// sticky (ClientIP affinity), empty (no endpoints, TCP and UDP), local
// (externalTrafficPolicy Local, its endpoints on another node), allowed
// and denied (loadBalancerSourceRanges with and without the client),
// internal (internalTrafficPolicy Local, no local endpoint).
var usServices = template.Must(template.New("services").Parse(`---
apiVersion: v1
kind: Service
metadata: {name: web-{{.Name}}, namespace: default}
spec:
  type: LoadBalancer
  clusterIP: "{{.Svc}}10"
  externalIPs: ["{{.Ext}}10"]
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: {{.NodePort 80}}}]
status: {loadBalancer: {ingress: [{ip: "{{.Ext}}20"}]}}
---
apiVersion: v1
kind: Service
metadata: {name: dns-{{.Name}}, namespace: default}
spec:
  type: NodePort
  clusterIP: "{{.Svc}}12"
  ports: [{name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: {{.NodePort 53}}}]
---
apiVersion: v1
kind: Service
metadata: {name: sticky-{{.Name}}, namespace: default}
spec:
  clusterIP: "{{.Svc}}11"
  sessionAffinity: ClientIP
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: empty-{{.Name}}, namespace: default}
spec:
  type: NodePort
  clusterIP: "{{.Svc}}13"
  ports: [{name: http, port: 80, nodePort: {{.NodePort 81}}}, {name: dns, protocol: UDP, port: 53, nodePort: {{.NodePort 81}}}]
---
apiVersion: v1
kind: Service
metadata: {name: local-{{.Name}}, namespace: default}
spec:
  type: LoadBalancer
  clusterIP: "{{.Svc}}14"
  externalTrafficPolicy: Local
  healthCheckNodePort: {{.NodePort 90}}
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: {{.NodePort 82}}}]
status: {loadBalancer: {ingress: [{ip: "{{.Ext}}21"}]}}
---
apiVersion: v1
kind: Service
metadata: {name: allowed-{{.Name}}, namespace: default}
spec:
  type: LoadBalancer
  clusterIP: "{{.Svc}}15"
  loadBalancerSourceRanges: [{{range $i, $r := .Allowed}}{{if $i}}, {{end}}"{{$r}}"{{end}}]
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: {{.NodePort 83}}}]
status: {loadBalancer: {ingress: [{ip: "{{.Ext}}22"}]}}
---
apiVersion: v1
kind: Service
metadata: {name: denied-{{.Name}}, namespace: default}
spec:
  type: LoadBalancer
  clusterIP: "{{.Svc}}16"
  loadBalancerSourceRanges: [{{range $i, $r := .Denied}}{{if $i}}, {{end}}"{{$r}}"{{end}}]
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: {{.NodePort 84}}}]
status: {loadBalancer: {ingress: [{ip: "{{.Ext}}23"}]}}
---
apiVersion: v1
kind: Service
metadata: {name: internal-{{.Name}}, namespace: default}
spec:
  clusterIP: "{{.Svc}}17"
  internalTrafficPolicy: Local
  ports: [{name: http, port: 80, targetPort: 8080}]
`))

// usSlice is the EndpointSlice of service svc-<family> over both pods,
// on node (none if empty).
func usSlice(f usFamily, svc, port, proto string, num int, node string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-%[2]s-1
  namespace: default
  labels: {kubernetes.io/service-name: %[1]s-%[2]s}
addressType: %[3]s
ports: [{name: %[4]s, protocol: %[5]s, port: %[6]d}]
endpoints:
`, svc, f.Name, f.AddrType, port, proto, num)
	for _, pod := range f.Pods {
		fmt.Fprintf(&b, "  - addresses: [%q]\n    conditions: {ready: true}\n", pod)
		if node != "" {
			fmt.Fprintf(&b, "    nodeName: %s\n", node)
		}
	}
	return b.String()
}

// usCluster is the manifests of the node and of every family's services.
func usCluster(t *testing.T) string {
	var b strings.Builder
	b.WriteString(usNode)
	for _, f := range usFamilies {
		if err := usServices.Execute(&b, f); err != nil {
			t.Fatal(err)
		}
		for _, svc := range []string{"web", "sticky", "allowed", "denied"} {
			b.WriteString(usSlice(f, svc, "http", "TCP", 8080, ""))
		}
		b.WriteString(usSlice(f, "dns", "dns", "UDP", 5353, ""))
		b.WriteString(usSlice(f, "local", "http", "TCP", 8080, "othernode"))
		b.WriteString(usSlice(f, "internal", "http", "TCP", 8080, "othernode"))
	}
	return b.String()
}

// usLate is the service added while the agent runs: late-<family>, a
// cluster IP; its endpoints (both pods) come in usLateSlice.
func usLate(f usFamily) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: late-%s, namespace: default}
spec:
  clusterIP: "%s18"
  ports: [{name: http, port: 80, targetPort: 8080}]
`, f.Name, f.Svc)
}

func usLateSlice(f usFamily) string { return usSlice(f, "late", "http", "TCP", 8080, "") }

// What a flow comes to from each source: a pod's answer is "served".
const outServed = "served"

// usSources are where flows come from, in the order of usFlow.want.
var usSources = [3]string{"pod", "node", "outside"}

type usFlow struct {
	what, network, addr string
	// want is the outcome from a pod, the node and the outside client.
	want [3]string
}

// usFlows are one family's flows and what State.Lookup says of each.
func usFlows(f usFamily) []usFlow {
	all := func(o string) [3]string { return [3]string{o, o, o} }
	// What externalTrafficPolicy Local without a local endpoint does:
	// pods and the node reach the cluster's endpoints, outside is dropped.
	internalOnly := [3]string{outServed, outServed, outDropped}
	fl := []usFlow{
		{"web cluster IP", "tcp", f.svc(10, 80), all(outServed)},
		{"web external IP", "tcp", f.ext(10, 80), all(outServed)},
		{"web LoadBalancer IP", "tcp", f.ext(20, 80), all(outServed)},
		{"dns cluster IP", "udp", f.svc(12, 53), all(outServed)},
		{"sticky cluster IP", "tcp", f.svc(11, 80), all(outServed)},
		{"empty cluster IP", "tcp", f.svc(13, 80), all(outRefused)},
		{"empty cluster IP", "udp", f.svc(13, 53), all(outRefused)},
		{"local cluster IP", "tcp", f.svc(14, 80), all(outServed)},
		{"local LoadBalancer IP", "tcp", f.ext(21, 80), internalOnly},
		// The node reaches the VIPs from its uplink address, inside
		// the allowed ranges; pods are outside them.
		{"allowed LoadBalancer IP", "tcp", f.ext(22, 80), [3]string{outDropped, outServed, outServed}},
		{"denied LoadBalancer IP", "tcp", f.ext(23, 80), all(outDropped)},
		{"internal cluster IP", "tcp", f.svc(17, 80), all(outDropped)},
	}
	for i, ip := range f.NodeIPs {
		on := fmt.Sprintf(" node port on node address %d", i+1)
		fl = append(fl,
			usFlow{"web" + on, "tcp", hostPort(ip, f.NodePort(80)), all(outServed)},
			usFlow{"dns" + on, "udp", hostPort(ip, f.NodePort(53)), all(outServed)},
			usFlow{"empty" + on, "tcp", hostPort(ip, f.NodePort(81)), all(outRefused)},
			usFlow{"empty" + on, "udp", hostPort(ip, f.NodePort(81)), all(outRefused)},
			usFlow{"local" + on, "tcp", hostPort(ip, f.NodePort(82)), internalOnly})
	}
	for i := range fl {
		fl[i].what = f.Name + " " + fl[i].what
	}
	return fl
}

// checkFlows sends every flow from each source, eight at a time, and
// compares the outcomes with what they should be.
func (l *usLab) checkFlows(t *testing.T, flows []usFlow) {
	t.Helper()
	from := [3]*netns.NS{l.pods[0], l.node, l.client}
	want, got := map[string]string{}, map[string]string{}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, 8)
	)
	for _, fl := range flows {
		for i, src := range usSources {
			key := fmt.Sprintf("from %s: %s %s/%s", src, fl.what, fl.addr, fl.network)
			want[key] = fl.want[i]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				o := probe(from[i], fl.network, fl.addr)
				if o == "pod1" || o == "pod2" {
					o = outServed
				}
				mu.Lock()
				got[key] = o
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flows (-want +got):\n%s", diff)
		for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"ip", "rule"}, {"ip", "-6", "rule"}, {"ss", "-ltnup"}, {"conntrack", "-L"}} {
			out, _ := l.node.Run(cmd[0], cmd[1:]...)
			t.Logf("%s in the node:\n%s", strings.Join(cmd, " "), out)
		}
	}
}

// checkBalance: connections in turn reach both pods, and ClientIP
// affinity keeps each client on one.
func (l *usLab) checkBalance(t *testing.T) {
	t.Helper()
	from := [3]*netns.NS{l.pods[0], l.node, l.client}
	for _, f := range usFamilies {
		for i, src := range usSources {
			for _, c := range []struct {
				what string
				addr string
				want int
			}{{"web", f.svc(10, 80), 2}, {"sticky", f.svc(11, 80), 1}} {
				seen, pods := map[string]bool{}, 0
				for range 4 {
					seen[probe(from[i], "tcp", c.addr)] = true
				}
				for _, pod := range []string{"pod1", "pod2"} {
					if seen[pod] {
						pods++
					}
				}
				if pods != c.want || len(seen) != pods {
					t.Errorf("from %s, 4 connections to %s-%s reached %v, want %d pod(s)", src, c.what, f.Name, seen, c.want)
				}
			}
		}
	}
}

// waitFor waits, a bounded time, until a connection of the outside
// client to addr comes to want (served: reaches a pod).
func (l *usLab) waitFor(t *testing.T, addr, want string, within time.Duration) {
	t.Helper()
	const pause = 100 * time.Millisecond
	var got string
	for range int(within / pause) {
		if got = probe(l.client, "tcp", addr); got == want || want == outServed && (got == "pod1" || got == "pod2") {
			return
		}
		time.Sleep(pause)
	}
	t.Fatalf("%s not %s within %v: %s", addr, want, within, got)
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKernelUserspaceServesTraffic runs the agent in userspace mode on a
// manifests folder, as a process in a node shaped as a real one (see
// usLab), and checks every flow that does not depend on the client's
// address being kept: from a pod, the node and an outside client, IPv4
// and IPv6, TCP and UDP, served, refused and dropped as State.Lookup
// says; then that a service added to the folder is refused until its
// endpoints are added too, then served, without a failed Sync; that
// verify and explain --kernel agree; and that --cleanup removes what the
// agent added and nothing else.
func TestKernelUserspaceServesTraffic(t *testing.T) {
	netns.Require(t, "iptables", "ip6tables", "iptables-restore", "iptables-save", "ip6tables-save", "sysctl")
	l := newUSLab(t)
	addForeign(t, l.node)
	before := readRouting(t, l.node)
	dir := t.TempDir()
	writeFile(t, dir, "cluster.yaml", usCluster(t))
	model := []string{"--proxy-mode", "userspace", "--manifests", dir, "--hostname-override", "usnode", "--cluster-cidr", usClusterCIDR}
	stop, output := startAgent(t, l.node, append(model, noConntrackMax, "--healthz-bind-address", "", "--metrics-bind-address", "")...)
	for _, f := range usFamilies {
		l.waitFor(t, f.svc(10, 80), outServed, 60*time.Second)
	}
	checkOwned(t, l.node, true)

	var flows []usFlow
	for _, f := range usFamilies {
		flows = append(flows, usFlows(f)...)
	}
	l.checkFlows(t, flows)
	l.checkBalance(t)

	// The folder is followed: a service written into it is refused
	// until its endpoints are written too, then served.
	writeFile(t, dir, "late.yaml", usLate(usV4)+usLate(usV6))
	for _, f := range usFamilies {
		l.waitFor(t, f.svc(18, 80), outRefused, 20*time.Second)
	}
	writeFile(t, dir, "late-endpoints.yaml", usLateSlice(usV4)+usLateSlice(usV6))
	flows = nil
	for _, f := range usFamilies {
		l.waitFor(t, f.svc(18, 80), outServed, 20*time.Second)
		flows = append(flows, usFlow{f.Name + " late cluster IP", "tcp", f.svc(18, 80), [3]string{outServed, outServed, outServed}})
	}
	l.checkFlows(t, flows)
	// Every change was written at once: no Sync failed and was retried.
	if out := output(); strings.Contains(out, "Sync failed") {
		t.Errorf("a sync failed:\n%s", out)
	}

	checkTroubleshoot(t, l.node, model)
	stop()
	// The redirects outlive the agent, its forwarders do not.
	out, _, code := agentExit(t, l.node, append(model, "verify")...)
	if code != exitFailure || !strings.Contains(out, "default/web-v4:http/TCP: wrong-verdict at 10.96.0.10:80/TCP (cluster IP)") {
		t.Errorf("verify with the agent stopped: exit %d, stdout:\n%s", code, out)
	}
	agentIn(t, l.node, "--proxy-mode", "userspace", "--cleanup")
	checkOwned(t, l.node, false)
	if diff := cmp.Diff(before, readRouting(t, l.node)); diff != "" {
		t.Errorf("--cleanup did not leave the node as it found it (-before +after):\n%s", diff)
	}
}

// checkTroubleshoot: verify and explain --kernel read the rules and the
// sockets: every frontend reaches a listening forwarder of its service,
// a client's TPROXYed packet the one on the cluster IP itself.
func checkTroubleshoot(t *testing.T, node *netns.NS, model []string) {
	t.Helper()
	out, errOut, code := agentExit(t, node, append(model, "verify")...)
	if code != exitOK || !strings.HasPrefix(out, "OK: the kernel's rules do what the model says") {
		t.Errorf("verify: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = agentExit(t, node, append(model, "explain", usV4.Client, usV4.svc(10, 80), "--kernel")...)
	if code != exitOK || !strings.Contains(out, "forwarder of default/web-v4:http/TCP on "+usV4.svc(10, 80)+":") || !strings.Contains(out, "agrees:     yes") {
		t.Errorf("explain --kernel: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// addForeign gives the node another program's rules in every table the
// agent writes, and a policy route of its own, for --cleanup to leave.
func addForeign(t *testing.T, node *netns.NS) {
	t.Helper()
	for _, f := range []struct{ cmd, ip, src, via, dst string }{
		{"iptables", "-4", "192.0.2.1/32", usV4.Sink, "192.0.2.0/24"},
		{"ip6tables", "-6", "2001:db8:ff::1/128", usV6.Sink, "2001:db8:ff::/64"},
	} {
		node.MustRun(f.cmd, "-t", "nat", "-A", "PREROUTING", "-s", f.src, "-j", "RETURN")
		node.MustRun(f.cmd, "-t", "mangle", "-A", "PREROUTING", "-s", f.src, "-j", "MARK", "--set-xmark", "0x1/0x1")
		node.MustRun(f.cmd, "-t", "filter", "-A", "INPUT", "-s", f.src, "-j", "DROP")
		node.MustRun("ip", f.ip, "rule", "add", "fwmark", "0x1/0x1", "lookup", "100", "priority", "2000")
		node.MustRun("ip", f.ip, "route", "add", f.dst, "via", f.via, "table", "100")
	}
}

// usRouting is what --cleanup must leave as it found it.
type usRouting struct {
	IPTables, IP6Tables, Rules, Rules6, Table100, Table100v6 string
}

func readRouting(t *testing.T, node *netns.NS) usRouting {
	t.Helper()
	var r usRouting
	r.IPTables, r.IP6Tables = saved(t, node)
	r.Rules, r.Rules6 = node.MustRun("ip", "rule"), node.MustRun("ip", "-6", "rule")
	r.Table100, r.Table100v6 = node.MustRun("ip", "route", "show", "table", "100"), node.MustRun("ip", "-6", "route", "show", "table", "100")
	return r
}

// checkOwned checks whether the agent's chains, its routing rule
// for fwmark 0x2000 and its table 20555 are there.
func checkOwned(t *testing.T, node *netns.NS, want bool) {
	t.Helper()
	v4, v6 := saved(t, node)
	for _, c := range []struct{ what, text, sign string }{
		{"iptables-save", v4, ":PKU-"},
		{"ip6tables-save", v6, ":PKU-"},
		{"ip rule", node.MustRun("ip", "rule"), "fwmark 0x2000"},
		{"ip -6 rule", node.MustRun("ip", "-6", "rule"), "fwmark 0x2000"},
		{"ip route show table 20555", routes(t, node, "-4"), "local "},
		{"ip -6 route show table 20555", routes(t, node, "-6"), "local "},
	} {
		if got := strings.Contains(c.text, c.sign); got != want {
			t.Errorf("%s holds %q: %v, want %v:\n%s", c.what, c.sign, got, want, c.text)
		}
	}
}

// routes lists table 20555, empty when the kernel has no such table.
func routes(t *testing.T, node *netns.NS, family string) string {
	t.Helper()
	out, err := node.Run("ip", family, "route", "show", "table", "20555")
	if err != nil && !strings.Contains(out, "FIB table does not exist") {
		t.Fatal(err)
	}
	return out
}
