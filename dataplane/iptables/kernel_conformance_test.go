package iptables

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// TestKernelConformance runs every scenario case a real kernel can
// reproduce through iptables-restore into a node namespace, with real TCP
// and UDP connections deciding each verdict, on a routed pod network
// (Calico's: pods behind veths without an address).
func TestKernelConformance(t *testing.T) {
	kernelConformance(t, kerneltest.PodNetworkRouted)
}

// TestKernelConformanceBridge is TestKernelConformance with every pod a
// port of a bridge that holds the pods' gateway (kubenet's cbr0).
func TestKernelConformanceBridge(t *testing.T) {
	kernelConformance(t, kerneltest.PodNetworkBridge)
}

func kernelConformance(t *testing.T, n kerneltest.PodNetwork) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save")
	scenarios := dataplanetest.Filter(dataplanetest.Scenarios(), n.Reproducible)
	dataplanetest.RunScenarios(t, scenarios, func(t *testing.T) dataplanetest.Harness {
		// Scenarios have namespaces of their own; most of their time is
		// spent waiting for connections a verdict drops.
		t.Parallel()
		var runner *xtables.ExecRunner
		return kerneltest.New(t, kerneltest.Config{
			PodNetwork: n,
			New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
				r, err := xtables.NewExecRunner(xtables.ExecConfig{Family: family})
				if err != nil {
					return nil, err
				}
				runner = r
				return New(Config{Family: family, Runner: r, Logger: funcr.New(func(string, string) {}, funcr.Options{})})
			},
			ForgetAffinity: forgetRecent,
			Disturb: func(d dataplanetest.Disturbance) error {
				return disturb(context.Background(), runner, d)
			},
		})
	})
}

// forgetRecent clears every xt_recent list of the calling thread's network
// namespace: the memory of ClientIP affinity.
func forgetRecent() error {
	lists, err := filepath.Glob("/proc/thread-self/net/xt_recent/*")
	if err != nil {
		return err
	}
	for _, l := range lists {
		if err := os.WriteFile(l, []byte("/"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
