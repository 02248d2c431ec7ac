package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxykit/proxykit/internal/netns"
)

// TestKernelUserspaceExposesOnlyWhatKubeProxyDoes runs the agent in
// userspace mode, with kube-proxy's default health and metrics addresses
// (0.0.0.0:10256 and 127.0.0.1:10249), in the lab of
// TestKernelUserspaceServesTraffic; then tries, from the outside client
// and from a pod, every TCP and UDP port on which a socket of the node
// listens, at each of the node's addresses, IPv4 and IPv6. Only what
// kube-proxy would also open answers: /healthz and the health-check node
// ports of the externalTrafficPolicy Local services. The forwarders' own
// ports, where the rules redirect service traffic, never answer a
// connection made to them directly, nor does the metrics server, which
// listens on loopback as kube-proxy's does.
func TestKernelUserspaceExposesOnlyWhatKubeProxyDoes(t *testing.T) {
	netns.Require(t, "iptables", "ip6tables", "iptables-restore", "iptables-save", "ip6tables-save", "sysctl")
	l := newUSLab(t)
	dir := t.TempDir()
	writeFile(t, dir, "cluster.yaml", usCluster(t))
	startAgent(t, l.node, "--proxy-mode", "userspace", "--manifests", dir, "--hostname-override", "usnode",
		"--cluster-cidr", usClusterCIDR, noConntrackMax)
	for _, f := range usFamilies {
		l.waitFor(t, f.svc(10, 80), outServed, 60*time.Second)
	}

	// What kube-proxy opens on the node's addresses: its health server
	// and, per family, the health-check node port of local-<family>.
	kubeProxy := map[string]bool{"tcp/10256": true}
	for _, f := range usFamilies {
		kubeProxy["tcp/"+strconv.Itoa(f.NodePort(90))] = true
	}
	tcp, udp, err := l.node.ListeningPorts()
	if err != nil {
		t.Fatal(err)
	}
	var forwarders int
	for _, p := range tcp {
		if !kubeProxy["tcp/"+strconv.Itoa(int(p))] {
			forwarders++
		}
	}
	// web, sticky, allowed, denied, local and internal per family, their
	// node ports, dns's: far more than this many.
	if forwarders < 10 || len(udp) < 2 {
		t.Fatalf("the node listens on TCP ports %v and UDP ports %v: fewer than its forwarders", tcp, udp)
	}

	type try struct{ from, network, addr, port string }
	var tries []try
	for _, from := range []string{"outside", "pod"} {
		for _, f := range usFamilies {
			for _, ip := range f.NodeIPs {
				for _, c := range []struct {
					network string
					ports   []uint16
				}{{"tcp", tcp}, {"udp", udp}} {
					for _, p := range c.ports {
						port := c.network + "/" + strconv.Itoa(int(p))
						tries = append(tries, try{from, c.network, hostPort(ip, int(p)), port})
					}
				}
			}
		}
	}
	source := map[string]*netns.NS{"outside": l.client, "pod": l.pods[0]}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 8)
		exposed  []string
		answered = map[string]bool{}
	)
	for _, tr := range tries {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			got := probe(source[tr.from], tr.network, tr.addr)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case got == outRefused || got == outDropped:
			case kubeProxy[tr.port]:
				answered[tr.from+" "+tr.addr] = true
			default:
				exposed = append(exposed, fmt.Sprintf("from %s, %s %s: %s", tr.from, tr.network, tr.addr, got))
			}
		}()
	}
	wg.Wait()
	if len(exposed) > 0 {
		slices.Sort(exposed)
		out, _ := l.node.Run("ss", "-ltnup")
		t.Errorf("ports of the node that kube-proxy would not open answer:\n%s\nsockets of the node:\n%s", strings.Join(exposed, "\n"), out)
	}
	// The probes reach what does listen: /healthz from both.
	for _, from := range []string{"outside", "pod"} {
		if addr := hostPort(usV4.NodeIPs[0], 10256); !answered[from+" "+addr] {
			t.Errorf("from %s, /healthz at %s did not answer", from, addr)
		}
	}
}
