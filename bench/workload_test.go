package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

func TestClusterAddressesUnique(t *testing.T) {
	for _, w := range []workload{
		{Name: "50k", Services: 50000, Endpoints: 2},
		{Name: "mix", Services: 2000, Endpoints: 3, Mix: true},
		{Name: "dual", Services: 2000, Endpoints: 3, DualStack: true},
	} {
		c := newCluster(w)
		c.addService()
		seen := map[string]string{}
		claim := func(what, owner string) {
			if prev, ok := seen[what]; ok {
				t.Fatalf("%s: %s used by %s and %s", w, what, prev, owner)
			}
			seen[what] = owner
		}
		for i, svc := range c.services {
			for _, ip := range svc.Spec.ClusterIPs {
				claim(ip, svc.Name)
			}
			if np := svc.Spec.Ports[0].NodePort; np != 0 {
				claim(fmt.Sprint("node port ", np), svc.Name)
			}
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				claim(ing.IP, svc.Name)
			}
			for _, sl := range c.slicesOf(i) {
				for _, ep := range sl.Endpoints {
					claim(ep.Addresses[0], svc.Name)
				}
			}
		}
	}
}

func TestChangeEndpoint(t *testing.T) {
	c := newCluster(workload{Services: 3, Endpoints: 2})
	ups := c.changeEndpoint(1, 1)
	if len(ups) != 1 {
		t.Fatalf("%d updates for a single-stack service, want 1", len(ups))
	}
	old, upd := ups[0].old, ups[0].new
	if old.Endpoints[1].Addresses[0] == upd.Endpoints[1].Addresses[0] || old.ResourceVersion == upd.ResourceVersion {
		t.Errorf("endpoint or resource version unchanged: %v, %v", old, upd)
	}
	if diff := cmp.Diff(old.Endpoints[0], upd.Endpoints[0]); diff != "" {
		t.Errorf("other endpoint changed (-old +new):\n%s", diff)
	}
	if c.slices[1] != upd {
		t.Error("cluster does not hold the new slice")
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestNFTBackendNames checks that the discarding knftables backend lists
// the chains and sets its transactions created and not deleted, as the
// proxier expects of a kernel.
func TestNFTBackendNames(t *testing.T) {
	ctx := context.Background()
	b := newNFTBackend(nil, v1.IPv4Protocol)
	tx := b.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "services"})
	tx.Add(&knftables.Chain{Name: "svc-1"})
	tx.Add(&knftables.Set{Name: "affinity-1", Type: "ipv4_addr"})
	if err := b.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	tx = b.NewTransaction()
	tx.Delete(&knftables.Chain{Name: "svc-1"})
	if err := b.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	chains, _ := b.List(ctx, "chains")
	sets, _ := b.List(ctx, "sets")
	if diff := cmp.Diff(map[string][]string{"chains": {"services"}, "sets": {"affinity-1"}},
		map[string][]string{"chains": chains, "sets": sets}); diff != "" {
		t.Errorf("listed names (-want +got):\n%s", diff)
	}
	b.failNext()
	if err := b.Run(ctx, b.NewTransaction()); err == nil {
		t.Error("failNext: Run succeeded")
	}
}
