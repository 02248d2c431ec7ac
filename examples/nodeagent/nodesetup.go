package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

// nodeSettings are the machine-wide settings kube-proxy makes at start:
// what --init-only does before it exits.
type nodeSettings struct {
	// sysctl is /proc/sys; moduleParams the nf_conntrack module's
	// parameters, where "hashsize" is (global to the machine, unlike the
	// timeouts, which are per network namespace).
	sysctl, moduleParams sysctl.Interface
	numCPU               int
	// oomScoreAdj sets the process's OOM score adjustment.
	oomScoreAdj func(int) error
}

// realNodeSettings touch the machine the agent runs on.
func realNodeSettings() nodeSettings {
	return nodeSettings{
		sysctl:       sysctl.Proc{},
		moduleParams: sysctl.Proc{Root: "/sys/module/nf_conntrack/parameters"},
		numCPU:       runtime.NumCPU(),
		oomScoreAdj: func(v int) error {
			return os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(v)), 0o644)
		},
	}
}

// maxConntrackEntries is the nf_conntrack_max kube-proxy asks for: the
// per-core figure times the CPUs, at least min, at most 2^20; 0 (leave it)
// when the per-core figure is 0.
func maxConntrackEntries(c *v1alpha1.KubeProxyConntrackConfiguration, cpus int) int {
	if c.MaxPerCore == nil || *c.MaxPerCore <= 0 {
		return 0
	}
	floor := 0
	if c.Min != nil {
		floor = int(*c.Min)
	}
	return min(max(int(*c.MaxPerCore)*cpus, floor), 1<<20)
}

// apply sets the conntrack sysctls as kube-proxy does (raising, never
// lowering, nf_conntrack_max, and the hash size to a quarter of it; each
// timeout only when positive) and then the OOM score adjustment, whose
// failure is only logged, as kube-proxy logs it.
func (n nodeSettings) apply(c *v1alpha1.KubeProxyConfiguration, log logr.Logger) error {
	ct := &c.Conntrack
	if m := maxConntrackEntries(ct, n.numCPU); m > 0 {
		if cur, err := getInt(n.sysctl, "net/netfilter/nf_conntrack_max"); err != nil || cur < m {
			if err := setInt(n.sysctl, "net/netfilter/nf_conntrack_max", m, log); err != nil {
				return fmt.Errorf("conntrack.maxPerCore (--conntrack-max-per-core): %w", err)
			}
		}
		hs, err := getInt(n.moduleParams, "hashsize")
		if err != nil {
			return fmt.Errorf("conntrack.maxPerCore (--conntrack-max-per-core): %w", err)
		}
		if hs < m/4 {
			log.Info("Setting conntrack hashsize", "conntrackHashsize", m/4)
			if err := n.moduleParams.Set("hashsize", strconv.Itoa(m/4)); err != nil {
				return fmt.Errorf("conntrack.maxPerCore (--conntrack-max-per-core): %w", err)
			}
		}
	}
	for _, t := range []struct {
		field, sysctl string
		d             time.Duration
	}{
		{"conntrack.tcpEstablishedTimeout (--conntrack-tcp-timeout-established)", "nf_conntrack_tcp_timeout_established", durationOf(ct.TCPEstablishedTimeout)},
		{"conntrack.tcpCloseWaitTimeout (--conntrack-tcp-timeout-close-wait)", "nf_conntrack_tcp_timeout_close_wait", durationOf(ct.TCPCloseWaitTimeout)},
		{"conntrack.udpTimeout (--conntrack-udp-timeout)", "nf_conntrack_udp_timeout", ct.UDPTimeout.Duration},
		{"conntrack.udpStreamTimeout (--conntrack-udp-timeout-stream)", "nf_conntrack_udp_timeout_stream", ct.UDPStreamTimeout.Duration},
	} {
		if t.d <= 0 {
			continue
		}
		if err := setInt(n.sysctl, "net/netfilter/"+t.sysctl, int(t.d/time.Second), log); err != nil {
			return fmt.Errorf("%s: %w", t.field, err)
		}
	}
	if ct.TCPBeLiberal {
		if err := setInt(n.sysctl, "net/netfilter/nf_conntrack_tcp_be_liberal", 1, log); err != nil {
			return fmt.Errorf("conntrack.tcpBeLiberal (--conntrack-tcp-be-liberal): %w", err)
		}
	}
	if c.OOMScoreAdj != nil {
		if err := n.oomScoreAdj(int(*c.OOMScoreAdj)); err != nil {
			log.V(2).Info("Failed to apply OOMScore", "err", err)
		}
	}
	return nil
}

func durationOf(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

func getInt(s sysctl.Interface, name string) (int, error) {
	v, err := s.Get(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(v)
}

// setInt writes name unless it already holds value.
func setInt(s sysctl.Interface, name string, value int, log logr.Logger) error {
	if cur, err := getInt(s, name); err == nil && cur == value {
		return nil
	}
	log.Info("Set sysctl", "entry", name, "value", value)
	return s.Set(name, strconv.Itoa(value))
}
