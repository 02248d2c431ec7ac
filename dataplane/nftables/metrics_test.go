package nftables

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
)

// TestMetrics checks the series both families' Dataplanes export on one
// Registerer, and the object gauges after a sync and a Cleanup.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	d4, err := New(Config{NFT: newFake(false), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Family: v1.IPv6Protocol, NFT: newFake(true), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	b := newBuilder()
	for n := range 3 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 2, 1))
	}
	if err := d4.Sync(t.Context(), b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP proxykit_nftables_objects Objects in the dataplane's table after the last successful Sync, by kind (element, chain, rule).
# TYPE proxykit_nftables_objects gauge
proxykit_nftables_objects{ip_family="IPv4",kind="chain"} 18
proxykit_nftables_objects{ip_family="IPv4",kind="element"} 18
proxykit_nftables_objects{ip_family="IPv4",kind="rule"} 24
proxykit_nftables_objects{ip_family="IPv6",kind="chain"} 0
proxykit_nftables_objects{ip_family="IPv6",kind="element"} 0
proxykit_nftables_objects{ip_family="IPv6",kind="rule"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "proxykit_nftables_objects"); err != nil {
		t.Error(err)
	}
	if err := d4.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(d4.metrics.elements); v != 0 {
		t.Errorf("elements after Cleanup = %v", v)
	}
}
