package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/internal/vmtest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// driftRepairWithin is how soon a disturbance must be noticed and
// repaired, traffic served again and /healthz back to 200: on the host's
// kernel and in the VM alike, where the CPU is emulated (TCG) and a
// process costs a tenth of a second (IPVS mode's canary reads its
// iptables rules over netlink, and a repair runs one iptables-save per
// table and one iptables-restore).
const driftRepairWithin = 5 * time.Second

// driftProbeEvery is how often traffic is checked after a disturbance.
const driftProbeEvery = 500 * time.Millisecond

// disturbance is another program's change to what a mode programmed in
// the node namespace.
type disturbance struct {
	name string
	do   func(t *testing.T, node *netns.NS)
}

func cmdIn(cmd ...string) func(*testing.T, *netns.NS) {
	return func(t *testing.T, node *netns.NS) { node.MustRun(cmd[0], cmd[1:]...) }
}

// driftDisturbances are, per mode, a flushed table or chain, one deleted
// object and a foreign rule in front of the mode's, each breaking the
// web service for the client or the node unless repaired.
func driftDisturbances(mode string) []disturbance {
	switch mode {
	case "iptables":
		return []disturbance{
			{"flushed table (iptables -t nat -F)", cmdIn("iptables", "-w", "5", "-t", "nat", "-F")},
			{"flushed chain PK-SERVICES", cmdIn("iptables", "-w", "5", "-t", "nat", "-F", "PK-SERVICES")},
			{"deleted jump (nat PREROUTING rule 1)", cmdIn("iptables", "-w", "5", "-t", "nat", "-D", "PREROUTING", "1")},
			{"foreign RETURN atop PK-SERVICES", cmdIn("iptables", "-w", "5", "-t", "nat", "-I", "PK-SERVICES", "1", "-j", "RETURN")},
		}
	case "nftables":
		return []disturbance{
			{"flushed table (nft flush table ip proxykit)", cmdIn("nft", "flush", "table", "ip", "proxykit")},
			{"flushed chain services", cmdIn("nft", "flush", "chain", "ip", "proxykit", "services")},
			{"deleted map element (service-ips 10.96.0.10 . tcp . 80)", cmdIn("nft", "delete", "element", "ip", "proxykit", "service-ips", "{ 10.96.0.10 . tcp . 80 }")},
			{"foreign return atop chain services", cmdIn("nft", "insert", "rule", "ip", "proxykit", "services", "ip", "daddr", "10.96.0.10", "return")},
		}
	case "ipvs":
		return []disturbance{
			{"flushed IPVS table (ipvsadm -C)", ipvsDo(func(h *mobyipvs.Handle, _ *mobyipvs.Service) error { return h.Flush() })},
			{"deleted virtual server 10.96.0.10:80", ipvsDo(func(h *mobyipvs.Handle, s *mobyipvs.Service) error { return h.DelService(s) })},
			{"deleted real server 10.0.1.1:8080", ipvsDo(func(h *mobyipvs.Handle, s *mobyipvs.Service) error {
				return h.DelDestination(s, &mobyipvs.Destination{Address: net.ParseIP("10.0.1.1"), Port: 8080})
			})},
			{"deleted dummy-link address 10.96.0.10", cmdIn("ip", "addr", "del", "10.96.0.10/32", "dev", ipvs.DefaultLink)},
			{"deleted ipset member PKV-CLUSTER-IP 10.96.0.10,tcp:80", func(t *testing.T, node *netns.NS) {
				port, proto := uint16(80), uint8(unix.IPPROTO_TCP)
				if err := node.Do(func() error {
					return netlink.IpsetDel("PKV-CLUSTER-IP", &netlink.IPSetEntry{IP: net.ParseIP("10.96.0.10").To4(), Port: &port, Protocol: &proto})
				}); err != nil {
					t.Fatalf("ipset del: %v", err)
				}
			}},
			{"flushed table (iptables -t nat -F)", cmdIn("iptables", "-w", "5", "-t", "nat", "-F")},
			{"foreign RETURN atop PKV-SERVICES", cmdIn("iptables", "-w", "5", "-t", "nat", "-I", "PKV-SERVICES", "1", "-j", "RETURN")},
		}
	case "userspace":
		return []disturbance{
			{"flushed tables (iptables -t mangle -F; -t nat -F)", func(t *testing.T, node *netns.NS) {
				node.MustRun("iptables", "-w", "5", "-t", "mangle", "-F")
				node.MustRun("iptables", "-w", "5", "-t", "nat", "-F")
			}},
			{"deleted redirect rule (nat PKU-SERVICES rule 1)", cmdIn("iptables", "-w", "5", "-t", "nat", "-D", "PKU-SERVICES", "1")},
			{"deleted redirect rule (mangle PKU-TPROXY rule 1)", cmdIn("iptables", "-w", "5", "-t", "mangle", "-D", "PKU-TPROXY", "1")},
			{"foreign RETURN atop PKU-TPROXY", cmdIn("iptables", "-w", "5", "-t", "mangle", "-I", "PKU-TPROXY", "1", "-j", "RETURN")},
		}
	}
	return nil
}

// ipvsDo runs fn on the virtual server 10.96.0.10:80/TCP of node.
func ipvsDo(fn func(h *mobyipvs.Handle, web *mobyipvs.Service) error) func(*testing.T, *netns.NS) {
	return func(t *testing.T, node *netns.NS) {
		t.Helper()
		if err := node.Do(func() error {
			h, err := mobyipvs.New("")
			if err != nil {
				return err
			}
			defer h.Close()
			svcs, err := h.GetServices()
			if err != nil {
				return err
			}
			for _, s := range svcs {
				if s.Address.Equal(net.ParseIP("10.96.0.10")) && s.Port == 80 {
					return fn(h, s)
				}
			}
			return fmt.Errorf("no virtual server 10.96.0.10:80")
		}); err != nil {
			t.Fatalf("IPVS: %v", err)
		}
	}
}

// TestKernelDriftRepaired runs the agent in each mode (ipvs where the
// kernel has it: TestKernelInVM) and, for each disturbance of
// driftDisturbances, checks every driftProbeEvery that the web service
// answers the client and the node: within driftRepairWithin the canary
// has noticed it (counted once), the reconcile repaired it, traffic is
// served and /healthz answers 200 again. While unrepaired /healthz
// answers 503 naming the dataplane (sampled every 50 ms, logged: the
// window is often shorter). The time to repair of each is logged
// ("drift:" lines).
func TestKernelDriftRepaired(t *testing.T) {
	netns.Require(t, "iptables", "ip6tables", "iptables-restore", "iptables-save", "ip6tables-save", "nft", "sysctl")
	modes := []string{"iptables", "nftables", "userspace"}
	switch {
	case len(ipvsMissing(t)) == 0:
		modes = []string{"ipvs"}
		if !vmtest.Inside() {
			modes = append(modes, "iptables", "nftables", "userspace")
		}
	case os.Getenv(netns.RequireKernelEnv) == "1" && vmtest.Inside():
		t.Fatalf("no IPVS in the VM: %v", ipvsMissing(t))
	}
	if !vmtest.Inside() {
		// The iptables-based modes again with the legacy backend, whose
		// canary reads the tables' summaries instead of the nftables
		// generation.
		modes = append(modes, "iptables/legacy", "userspace/legacy")
	}
	for _, run := range modes {
		t.Run(run, func(t *testing.T) {
			mode, variant, _ := strings.Cut(run, "/")
			if variant != "" {
				useIptablesVariant(t, variant)
			}
			l := newSwitchLab(t)
			_, output := startAgent(t, l.node, "--proxy-mode", mode, "--manifests", l.dir, "--hostname-override", "n1", noConntrackMax,
				"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249")
			waitSynced(t, output, mode, 60*time.Second)
			l.waitServed(t, mode)
			if variant != "" {
				if out := l.node.MustRun("iptables-"+variant+"-save", "-t", "nat"); !strings.Contains(out, ":PK") {
					t.Fatalf("the agent's rules are not in iptables-%s's tables:\n%s", variant, out)
				}
			}
			for _, dist := range driftDisturbances(mode) {
				before := l.kernelChanges(t, mode)
				start := time.Now()
				dist.do(t, l.node)
				took, saw503, ok := l.awaitRepair(t, mode, before, start)
				noticed := agentLogAfter(output(), start, "Rules changed by someone else")
				repaired := agentLogAfter(output(), start, "Repaired rules someone else changed")
				t.Logf("drift: %s | %s | noticed after %v, repaired after %v (agent's log) | served and /healthz 200 at the %v probe | /healthz 503 seen: %v",
					run, dist.name, noticed, repaired, took.Round(10*time.Millisecond), saw503)
				if !ok {
					t.Fatalf("%s: %s: not repaired within %v (traffic, /healthz 200 and the count of kernel changes)\nagent output:\n%s",
						run, dist.name, driftRepairWithin, output())
				}
			}
		})
	}
}

// useIptablesVariant puts first on PATH, for the rest of t, iptables
// commands of variant ("legacy" or "nft"): the agent, like kube-proxy,
// runs the iptables it finds, and the disturbances run the same.
func useIptablesVariant(t *testing.T, variant string) {
	t.Helper()
	multi, err := exec.LookPath("xtables-" + variant + "-multi")
	if err != nil {
		netns.Require(t, "xtables-"+variant+"-multi")
	}
	dir := t.TempDir()
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			if err := os.Symlink(multi, filepath.Join(dir, fam+suffix)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// agentLogAfter is how long after start the agent first logged a line
// containing msg (klog's header: local time to the microsecond); -1 when
// it did not.
func agentLogAfter(out string, start time.Time, msg string) time.Duration {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.Contains(line, msg) || len(line) < 21 {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
		if err != nil {
			continue
		}
		at = at.AddDate(start.Year(), 0, 0)
		if at.After(start) {
			return at.Sub(start).Round(time.Millisecond)
		}
	}
	return -1
}

// waitServed waits, a bounded time, until the web service answers.
func (l *switchLab) waitServed(t *testing.T, mode string) {
	t.Helper()
	for range 50 {
		if l.served() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: the web service is not served", mode)
}

// served reports whether the web service answers the client and the
// node at its cluster IP.
func (l *switchLab) served() bool {
	for _, from := range []*netns.NS{l.client, l.node} {
		if quickProbe(from, "10.96.0.10:80") != "pod" {
			return false
		}
	}
	return true
}

// quickProbe is probe with a deadline short enough to probe every
// driftProbeEvery.
func quickProbe(ns *netns.NS, addr string) string {
	var got string
	_ = ns.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		got, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	name, _, _ := strings.Cut(strings.TrimSpace(got), " ")
	return name
}

// awaitRepair waits until traffic is served, /healthz answers 200 and the
// canary counted one more change than before, at most driftRepairWithin
// after start; it returns how long that took and whether /healthz was
// seen failing with the mode named in its body.
func (l *switchLab) awaitRepair(t *testing.T, mode string, before int, start time.Time) (time.Duration, bool, bool) {
	t.Helper()
	saw503 := false
	nextProbe := start.Add(driftProbeEvery)
	const within = driftRepairWithin
	for range int(within/(50*time.Millisecond)) + 20 {
		code, body := l.get(t, "127.0.0.1:10256", "/healthz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, `"dataplane":"`+mode+`"`) {
			saw503 = true
		}
		now := time.Now()
		if now.After(nextProbe) {
			nextProbe = nextProbe.Add(driftProbeEvery)
			// The count first, then /healthz again: a 200 read before
			// the canary noticed would pass for a repair.
			if l.kernelChanges(t, mode) > before {
				if code, _ := l.get(t, "127.0.0.1:10256", "/healthz"); code == http.StatusOK && l.served() {
					return time.Since(start), saw503, time.Since(start) <= within
				}
			}
		}
		if now.Sub(start) > within {
			return now.Sub(start), saw503, false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), saw503, false
}

// get fetches path from the agent's server at addr in the node namespace.
func (l *switchLab) get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	var (
		code int
		body []byte
	)
	// The connection is made here, on the thread in the namespace: an
	// http.Client would dial from a goroutine of its own.
	if err := l.node.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		code = resp.StatusCode
		body, err = io.ReadAll(resp.Body)
		return err
	}); err != nil {
		t.Fatalf("GET %s%s: %v", addr, path, err)
	}
	return code, string(body)
}

// kernelChanges is the agent's count of IPv4 disturbances its canary
// noticed in mode.
func (l *switchLab) kernelChanges(t *testing.T, mode string) int {
	t.Helper()
	_, body := l.get(t, "127.0.0.1:10249", "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "proxykit_dataplane_kernel_changes_detected_total{") &&
			strings.Contains(line, `dataplane="`+mode+`"`) && strings.Contains(line, `ip_family="IPv4"`) {
			f := strings.Fields(line)
			n, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return int(n)
		}
	}
	return 0
}
