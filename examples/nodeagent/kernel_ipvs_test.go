package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/internal/vmtest"
	"github.com/vishvananda/netlink"
)

// requireIPVS skips t unless the kernel has IPVS and dummy links and
// iptables-restore is on PATH. Under PROXYKIT_REQUIRE_KERNEL=1 a missing
// one fails t inside the test VM; on a host without them t skips, as
// TestKernelInVM runs it in the VM (and fails where it cannot).
func requireIPVS(t *testing.T) {
	t.Helper()
	netns.Require(t, "iptables-restore")
	missing := ipvsMissing(t)
	if len(missing) == 0 {
		return
	}
	msg := "kernel test needs IPVS and dummy links: " + strings.Join(missing, "; ")
	if os.Getenv(netns.RequireKernelEnv) == "1" && vmtest.Inside() {
		t.Fatalf("%s (%s=1 forbids skipping)", msg, netns.RequireKernelEnv)
	}
	t.Skip(msg + " (TestKernelInVM runs it in a VM)")
}

// ipvsMissing says what of IPVS and dummy links the kernel lacks, probed
// in a namespace of its own; nil when it has both.
func ipvsMissing(t *testing.T) []string {
	t.Helper()
	probe := netns.New(t, "ipvsprobe")
	var missing []string
	if err := probe.Do(ipvs.Probe); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := probe.Run("ip", "link", "add", "pkprobe0", "type", "dummy"); err != nil {
		missing = append(missing, "dummy links: "+strings.TrimSpace(err.Error()))
	}
	return missing
}

// ipvsLBManifest adds a LoadBalancer with source ranges and
// externalTrafficPolicy Local, so that verify follows the filter chains'
// firewall and the Local policy through the kernel's rules as listed.
const ipvsLBManifest = `---
apiVersion: v1
kind: Service
metadata:
  name: lb
  namespace: default
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.30
  externalTrafficPolicy: Local
  healthCheckNodePort: 32000
  loadBalancerSourceRanges: [203.0.113.0/24]
  ports:
  - name: http
    port: 80
    targetPort: 8080
    nodePort: 30090
status:
  loadBalancer:
    ingress:
    - ip: 192.0.2.50
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: lb-1
  namespace: default
  labels:
    kubernetes.io/service-name: lb
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses: [10.0.1.1]
  conditions: {ready: true}
  nodeName: n1
`

// TestKernelIPVSServesTraffic runs the agent in ipvs mode inside a node
// namespace and sends real connections from a client namespace: to the
// cluster IP and the node port (served by a pod namespace), and to a
// service without endpoints (refused). verify, list and explain --kernel
// then read the kernel (troubleshootIPVS), and --cleanup leaves no
// virtual server, address, link, set or chain of the agent.
func TestKernelIPVSServesTraffic(t *testing.T) {
	requireIPVS(t)
	node, pod, client := netns.New(t, "node"), netns.New(t, "pod"), netns.New(t, "client")
	if vmtest.Inside() {
		// TestKernelInVM leaves xfrm_user out: a handle of every
		// netlink family fails there, and the agent must not need one.
		err := node.Do(func() error {
			h, err := netlink.NewHandle()
			if err == nil {
				h.Close()
			}
			return err
		})
		if !errors.Is(err, syscall.EPROTONOSUPPORT) {
			t.Fatalf("a netlink handle of every family in the VM: %v, want EPROTONOSUPPORT (xfrm_user left out)", err)
		}
	}
	netns.Veth(t, node, "veth1", []string{"10.0.1.254/24"}, pod, "eth0", []string{"10.0.1.1/24"})
	netns.Veth(t, node, "eth0", []string{"10.0.2.254/24"}, client, "eth0", []string{"10.0.2.9/24"})
	pod.MustRun("ip", "route", "add", "default", "via", "10.0.1.254")
	client.MustRun("ip", "route", "add", "default", "via", "10.0.2.254")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(nftManifests+ipvsLBManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := pod.Do(func() (err error) {
		ln, err = net.Listen("tcp", "10.0.1.1:8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("pod " + c.RemoteAddr().String() + "\n"))
			c.Close()
		}
	}()

	agentIn(t, node, "--proxy-mode", "ipvs", "--manifests", dir, "--hostname-override", "n1", "--once", noConntrackMax)

	dial := func(from *netns.NS, addr string) (string, error) {
		var answer string
		err := from.Do(func() error {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			answer, err = bufio.NewReader(c).ReadString('\n')
			return err
		})
		return strings.TrimSpace(answer), err
	}
	for _, tc := range []struct {
		from       *netns.NS
		name, addr string
		want       string
	}{
		{client, "client", "10.96.0.10:80", "pod 10.0.2.9:"},
		{client, "client", "10.0.1.254:30080", "pod 10.0.1.254:"},
		{node, "node", "10.96.0.10:80", "pod "},
	} {
		got, err := dial(tc.from, tc.addr)
		if err != nil || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s to %s: %q, %v; want %q...", tc.name, tc.addr, got, err, tc.want)
		}
	}
	if _, err := dial(client, "10.96.0.20:80"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("client to a service without endpoints: %v, want it refused", err)
	}

	troubleshootIPVS(t, node, "--proxy-mode", "ipvs", "--manifests", dir, "--hostname-override", "n1")

	agentIn(t, node, "--proxy-mode", "ipvs", "--cleanup", noConntrackMax)
	if err := node.Do(func() error {
		d, err := ipvs.New(ipvs.Config{})
		if err != nil {
			return err
		}
		left, err := d.Leftovers(context.Background())
		if err != nil {
			return err
		}
		if !left.Empty() {
			t.Errorf("after --cleanup: %+v", left)
		}
		if _, err := netlink.LinkByName(ipvs.DefaultLink); err == nil {
			t.Errorf("the link %s is left after --cleanup", ipvs.DefaultLink)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if saved := node.MustRun("iptables-save"); strings.Contains(saved, "PKV") {
		t.Errorf("iptables after --cleanup:\n%s", saved)
	}
}

// troubleshootIPVS checks, on the kernel the agent programmed in ns with
// the manifests of TestKernelIPVSServesTraffic, that verify and explain
// --kernel agree with the model and list lists the services; that after
// the cluster IP's only real server is deleted by hand verify fails
// naming the service and explain --kernel disagrees.
func troubleshootIPVS(t *testing.T, ns *netns.NS, agentArgs ...string) {
	t.Helper()
	run := func(args ...string) (string, string, int) {
		return agentExit(t, ns, append(append([]string{}, agentArgs...), args...)...)
	}
	out, errOut, code := run("verify")
	if code != exitOK || !strings.HasPrefix(out, "OK: the kernel's rules do what the model says") {
		t.Fatalf("verify after --once: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = run("list")
	if code != exitOK || !strings.Contains(out, "10.96.0.10:80/TCP") || !strings.Contains(out, "default/web:http/TCP") ||
		!strings.Contains(out, "192.0.2.50:80/TCP") {
		t.Errorf("list: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = run("explain", "10.0.2.9", "10.96.0.10:80", "--kernel")
	if code != exitOK || !strings.Contains(out, "ipvs: virtual server TCP 10.96.0.10:80 rr: real servers 10.0.1.1:8080 weight 1") {
		t.Errorf("explain --kernel: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// Delete the real server by hand.
	ipvsDo(func(h *mobyipvs.Handle, web *mobyipvs.Service) error {
		return h.DelDestination(web, &mobyipvs.Destination{Address: net.ParseIP("10.0.1.1"), Port: 8080})
	})(t, ns)
	out, errOut, code = run("verify")
	t.Logf("verify after a real server deleted by hand: exit %d, stdout:\n%s", code, out)
	if code == exitOK || !strings.Contains(out, "default/web:http/TCP: wrong-verdict at 10.96.0.10:80/TCP (cluster IP)") ||
		!strings.Contains(errOut, "the kernel's rules differ from the model for default/web:http/TCP") {
		t.Errorf("verify after a real server deleted by hand: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = run("explain", "10.0.2.9", "10.96.0.10:80", "--kernel")
	if code == exitOK || !strings.Contains(out, "DISAGREES:") {
		t.Errorf("explain --kernel after a real server deleted by hand: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
