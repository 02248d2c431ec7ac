package ipvs

import (
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	v1 "k8s.io/api/core/v1"
)

// TestKernelInternalTraffic sends the conformance cases of an
// externalTrafficPolicy Local service without local endpoints through
// IPVS: from a pod and from the node, its node ports (on both node
// addresses), LoadBalancer VIP and external IP reach every endpoint;
// from outside they are dropped. It drives the lab itself, without
// subtests, so that the VM's test pattern selects it whole.
func TestKernelInternalTraffic(t *testing.T) {
	requireIPVS(t)
	const name = "ExternalTrafficPolicyLocal without local endpoints"
	scenarios := dataplanetest.Filter(dataplanetest.Scenarios(), kerneltest.Reproducible)
	i := slicesIndex(scenarios, name)
	if i < 0 {
		t.Fatalf("no reproducible scenario %q", name)
	}
	s := scenarios[i]
	ctx := t.Context()
	h := kerneltest.New(t, kerneltest.Config{New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
		return New(Config{Family: family})
	}})
	_, st := s.Build(t)
	if err := h.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Cleanup(t.Context()) })
	origins := map[dataplane.Origin]int{}
	for _, c := range s.Packets {
		got, err := h.Trace(ctx, c.Packet)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if d := dataplanetest.DiffVerdict(h.Observable(c.WantIn(dataplane.ModeIPVS)), got); d != "" {
			t.Errorf("%s (-want +got):\n%s", c.Name, d)
		}
		origins[c.Packet.From]++
	}
	if origins[dataplane.FromLocalPod] == 0 || origins[dataplane.FromNode] == 0 || origins[dataplane.FromOutside] == 0 {
		t.Errorf("cases by origin %v: want pods, the node and outside clients", origins)
	}
}

func slicesIndex(scenarios []dataplanetest.Scenario, name string) int {
	for i, s := range scenarios {
		if s.Name == name {
			return i
		}
	}
	return -1
}
