package main

import (
	"bufio"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
)

// nftManifests is a node with one pod, a NodePort service served by it and
// a service without endpoints.
const nftManifests = `apiVersion: v1
kind: Node
metadata:
  name: n1
status:
  addresses:
  - type: InternalIP
    address: 10.0.1.254
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  type: NodePort
  clusterIP: 10.96.0.10
  ports:
  - name: http
    port: 80
    targetPort: 8080
    nodePort: 30080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses: [10.0.1.1]
  conditions: {ready: true}
  nodeName: n1
---
apiVersion: v1
kind: Service
metadata:
  name: empty
  namespace: default
spec:
  clusterIP: 10.96.0.20
  ports:
  - name: http
    port: 80
`

// TestKernelNFTablesServesTraffic runs the agent in nftables mode inside a
// node namespace, with no nft on its PATH, and sends real connections: to
// the cluster IP and the node port (served by a pod namespace), to a
// service without endpoints and to an unserved port of a cluster IP (both
// rejected). verify reads the table; --cleanup then removes it.
func TestKernelNFTablesServesTraffic(t *testing.T) {
	netns.Require(t, "nft")
	node, pod := netns.New(t, "node"), netns.New(t, "pod")
	netns.Veth(t, node, "veth1", []string{"10.0.1.254/24"}, pod, "eth0", []string{"10.0.1.1/24"})
	pod.MustRun("ip", "route", "add", "default", "via", "10.0.1.254")
	// Service addresses are routed before the nat chains rewrite them.
	node.MustRun("ip", "route", "add", "10.96.0.0/16", "via", "10.0.1.1")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(nftManifests), 0o644); err != nil {
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

	noNFT := []string{"PATH=" + pathWithout(t, "nft")}
	agentInEnv(t, node, noNFT, "--proxy-mode", "nftables", "--manifests", dir, "--hostname-override", "n1", "--once")

	dial := func(addr string) (string, error) {
		var answer string
		err := node.Do(func() error {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			answer, err = bufio.NewReader(c).ReadString('\n')
			return err
		})
		return strings.TrimSpace(answer), err
	}
	for _, addr := range []string{"10.96.0.10:80", "10.0.1.254:30080"} {
		got, err := dial(addr)
		if err != nil || !strings.HasPrefix(got, "pod 10.0.1.254:") {
			t.Errorf("connect to %s: %q, %v; want the pod's answer to the node", addr, got, err)
		}
	}
	for _, addr := range []string{"10.96.0.20:80", "10.96.0.10:81"} {
		if _, err := dial(addr); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("connect to %s: %v, want it refused", addr, err)
		}
	}

	verify := agentInEnv(t, node, noNFT, "--proxy-mode", "nftables", "--manifests", dir, "--hostname-override", "n1", "verify")
	if !strings.Contains(verify, "OK") {
		t.Errorf("verify without nft:\n%s", verify)
	}

	// A rule only nft can print, put in the agent's table by another
	// program: without nft, verify names it; with nft, nft lists it.
	node.MustRun("nft", "insert", "rule", "ip", "proxykit", "services", "meta skuid 0 counter accept")
	args := []string{"--proxy-mode", "nftables", "--manifests", dir, "--hostname-override", "n1", "verify"}
	if out, err := agentResult(t, node, noNFT, args...); err == nil || !strings.Contains(out, "rule handle") || !strings.Contains(out, "chain services") {
		t.Errorf("verify without nft, a foreign rule in the table: %v\n%s\nwant it to fail naming the rule", err, out)
	}
	// What nft printed of it is what verify cannot trace.
	if out, _ := agentResult(t, node, nil, args...); strings.Contains(out, "rule handle") || !strings.Contains(out, `untraceable`) || !strings.Contains(out, `"meta skuid 0 counter`) {
		t.Errorf("verify with nft, a foreign rule in the table:\n%s\nwant the rule as nft lists it, untraceable", out)
	}
	node.MustRun("nft", "delete", "rule", "ip", "proxykit", "services", "handle", foreignHandle(t, node))

	out := agentInEnv(t, node, noNFT, "--proxy-mode", "nftables", "--cleanup")
	want := []string{
		`I "Removed the agent's rules" ipFamily="IPv4" table="ip proxykit" chains=17`,
		`I "Removed the agent's rules" ipFamily="IPv6" table="ip6 proxykit" chains=15`,
	}
	if diff := cmp.Diff(want, logLines(out)); diff != "" {
		t.Errorf("--cleanup said (-want +got):\n%s", diff)
	}
	if tables := node.MustRun("nft", "list", "tables"); strings.TrimSpace(tables) != "" {
		t.Errorf("tables after --cleanup:\n%s", tables)
	}
}

// pathWithout is a PATH of the machine's programs less the ones named:
// a directory of links to everything else in the usual directories.
func pathWithout(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if slices.Contains(names, e.Name()) {
				continue
			}
			// The first directory's program wins, as on the PATH.
			_ = os.Symlink(filepath.Join(d, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	return dir
}

// foreignHandle is the handle of the rule matching skuid in the agent's
// services chain.
func foreignHandle(t *testing.T, node *netns.NS) string {
	t.Helper()
	for _, line := range strings.Split(node.MustRun("nft", "-a", "list", "chain", "ip", "proxykit", "services"), "\n") {
		if _, h, ok := strings.Cut(line, "skuid 0 counter"); ok {
			if _, n, ok := strings.Cut(h, "# handle "); ok {
				return strings.TrimSpace(n)
			}
		}
	}
	t.Fatal("the foreign rule is not in chain services")
	return ""
}
