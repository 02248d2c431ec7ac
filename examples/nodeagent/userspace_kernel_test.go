package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/netns"
)

// userspaceManifests is a node at 10.1.0.1 and four services whose
// endpoints are two pods, 10.2.1.2 and 10.2.2.2: web (a NodePort), sticky
// (ClientIP affinity), dns (UDP) and empty (no endpoints).
const userspaceManifests = `
apiVersion: v1
kind: Node
metadata: {name: usnode}
status:
  addresses: [{type: InternalIP, address: 10.1.0.1}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: NodePort
  clusterIP: 10.96.0.10
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}]
---
apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: default}
spec:
  clusterIP: 10.96.0.11
  sessionAffinity: ClientIP
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec:
  clusterIP: 10.96.0.12
  ports: [{name: dns, protocol: UDP, port: 53, targetPort: 5353}]
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  clusterIP: 10.96.0.13
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
`

// userspaceSlice is the slice of service name over both pods.
func userspaceSlice(name, port, proto string, num int) string {
	return fmt.Sprintf(`---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-1
  namespace: default
  labels: {kubernetes.io/service-name: %[1]s}
addressType: IPv4
ports: [{name: %[2]s, protocol: %[3]s, port: %[4]d}]
endpoints:
  - addresses: [10.2.1.2]
    conditions: {ready: true}
  - addresses: [10.2.2.2]
    conditions: {ready: true}
`, name, port, proto, num)
}

// TestKernelUserspaceServesTraffic runs the agent in userspace mode as a
// process in a node namespace and sends real connections from a client
// namespace to pods in two others.
func TestKernelUserspaceServesTraffic(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save")
	node := netns.New(t, "usnode")
	// A node forwards and has a default route, as every Kubernetes node
	// does: traffic to a cluster IP without endpoints is rejected on its
	// way through.
	node.MustRun("sysctl", "-qw", "net.ipv4.ip_forward=1")
	netns.Veth(t, node, "uplink", []string{"10.9.0.1/24"}, netns.New(t, "ussink"), "eth0", []string{"10.9.0.2/24"})
	node.MustRun("ip", "route", "add", "default", "via", "10.9.0.2")
	client := netns.New(t, "uscli")
	netns.Veth(t, node, "cli0", []string{"10.1.0.1/24"}, client, "eth0", []string{"10.1.0.2/24"})
	client.MustRun("ip", "route", "add", "default", "via", "10.1.0.1")
	for i, name := range []string{"uspod1", "uspod2"} {
		pod := netns.New(t, name)
		nodeIP, podIP := fmt.Sprintf("10.2.%d.1", i+1), fmt.Sprintf("10.2.%d.2", i+1)
		netns.Veth(t, node, fmt.Sprintf("pod%d", i+1), []string{nodeIP + "/24"}, pod, "eth0", []string{podIP + "/24"})
		pod.MustRun("ip", "route", "add", "default", "via", nodeIP)
		servePod(t, pod, podIP)
	}

	dir := t.TempDir()
	manifests := userspaceManifests + userspaceSlice("web", "http", "TCP", 8080) +
		userspaceSlice("sticky", "http", "TCP", 8080) + userspaceSlice("dns", "dns", "UDP", 5353)
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := startAgent(t, node, "--proxy-mode", "userspace", "--manifests", dir, "--hostname-override", "usnode",
		"--healthz-bind-address", "", "--metrics-bind-address", "")

	askFrom := func(from *netns.NS, network, addr string) (string, error) {
		var line string
		err := from.Do(func() error {
			c, err := net.DialTimeout(network, addr, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write([]byte("hi\n")); err != nil {
				return err
			}
			line, err = bufio.NewReader(c).ReadString('\n')
			return err
		})
		return strings.TrimSpace(line), err
	}
	ask := func(network, addr string) (string, error) { return askFrom(client, network, addr) }
	// The agent is up once the cluster IP answers.
	var err error
	for range 200 {
		if _, err = ask("tcp", "10.96.0.10:80"); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the web service never answered: %v", err)
	}

	seen := func(network, addr string) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range 10 {
			pod, err := ask(network, addr)
			if err != nil {
				t.Fatalf("%s %s: %v", network, addr, err)
			}
			got[pod]++
		}
		return got
	}
	both := map[string]bool{"10.2.1.2": true, "10.2.2.2": true}
	for _, c := range []struct{ what, network, addr string }{
		{"cluster IP", "tcp", "10.96.0.10:80"},
		{"node port", "tcp", "10.1.0.1:30080"},
		{"UDP cluster IP", "udp", "10.96.0.12:53"},
	} {
		got := seen(c.network, c.addr)
		for pod := range got {
			if !both[pod] {
				t.Errorf("%s reached %q", c.what, pod)
			}
		}
		if len(got) != 2 {
			t.Errorf("%s reached %v, want both pods in turn", c.what, got)
		}
	}
	// The node's own traffic is redirected to loopback, and answered
	// from the service address.
	for _, network := range []string{"tcp", "udp"} {
		addr := map[string]string{"tcp": "10.96.0.10:80", "udp": "10.96.0.12:53"}[network]
		if pod, err := askFrom(node, network, addr); err != nil || !both[pod] {
			t.Errorf("from the node, %s %s: %q, %v", network, addr, pod, err)
		}
	}
	if got := seen("tcp", "10.96.0.11:80"); len(got) != 1 {
		t.Errorf("the ClientIP-affinity service reached %v, want one pod", got)
	}
	if _, err := ask("tcp", "10.96.0.13:80"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the service without endpoints: %v, want connection refused", err)
	}

	// verify and explain --kernel read the redirects and the sockets:
	// every frontend reaches a listening forwarder of its service.
	model := []string{"--proxy-mode", "userspace", "--manifests", dir, "--hostname-override", "usnode"}
	out, errOut, code := agentExit(t, node, append(model, "verify")...)
	if code != exitOK || !strings.HasPrefix(out, "OK: the kernel's rules do what the model says") {
		t.Errorf("verify: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = agentExit(t, node, append(model, "explain", "10.1.0.2", "10.96.0.10:80", "--kernel")...)
	if code != exitOK || !strings.Contains(out, "forwarder of default/web:http/TCP on port ") || !strings.Contains(out, "agrees:     yes") {
		t.Errorf("explain --kernel: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	stop()
	// The redirects outlive the agent, its forwarders do not.
	out, _, code = agentExit(t, node, append(model, "verify")...)
	if code != exitFailure || !strings.Contains(out, "default/web:http/TCP: wrong-verdict at 10.96.0.10:80/TCP (cluster IP)") {
		t.Errorf("verify with the agent stopped: exit %d, stdout:\n%s", code, out)
	}
	if v4, _ := saved(t, node); !strings.Contains(v4, ":PKU-SERVICES") {
		t.Errorf("no PKU-SERVICES chain while the agent ran:\n%s", v4)
	}
	agentIn(t, node, "--proxy-mode", "userspace", "--cleanup")
	if v4, _ := saved(t, node); strings.Contains(v4, "PKU-") {
		t.Errorf("--cleanup left rules:\n%s", v4)
	}
}

// servePod answers every TCP connection to port 8080 and datagram to port
// 5353 of ns with the pod's address ip and a newline.
func servePod(t *testing.T, ns *netns.NS, ip string) {
	t.Helper()
	var (
		ln net.Listener
		pc net.PacketConn
	)
	if err := ns.Do(func() (err error) {
		if ln, err = net.Listen("tcp", ip+":8080"); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", ip+":5353")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, ip)
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(ip+"\n"), from)
		}
	}()
}

// startAgent starts the agent as a whole process inside ns and returns
// what stops it, which the test's end calls too; its output is logged
// when the test failed.
func startAgent(t *testing.T, ns *netns.NS, args ...string) (stop func()) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	enc, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(self)
	cmd.Env = append(os.Environ(), agentArgsEnv+"="+string(enc), "KUBERNETES_SERVICE_HOST=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("agent output:\n%s", out.String())
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
