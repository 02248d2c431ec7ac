package proxykit

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// TestProxyReconcilesPortThatAppearsAfterItsEndpoints: a UDP node-port
// service created after its EndpointSlice is reconciled when it appears,
// so that flows sent to it before (refused, or answered by a process on the
// node) are flushed although its endpoints did not change.
func TestProxyReconcilesPortThatAppearsAfterItsEndpoints(t *testing.T) {
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}}).start()
	in := h.p.Handler()
	in.OnEndpointSlice(nil, udpSlice("ns", "dns", "10.0.1.1"))
	h.settle()
	if got := h.cleaner.summaries(); len(got) != 0 {
		t.Fatalf("cleanup for endpoints of no service: %v", got)
	}

	svc := udpService("ns", "dns", "172.30.0.10", 53)
	svc.Spec.Type = v1.ServiceTypeNodePort
	svc.Spec.Ports[0].NodePort = 30053
	in.OnService(nil, svc)
	waitFor(t, "service programmed", func() bool { return len(stateSummary(rec.Programmed())) == 1 })
	h.settle()
	want := [][]string{{"IPv4 port ns/dns:dns/UDP"}}
	if diff := cmp.Diff(want, h.cleaner.summaries()); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
}

// TestConntrackDebtClear: a paid debt owes nothing, whether it was small
// (its sets reused) or large (its sets replaced), and collects again.
func TestConntrackDebtClear(t *testing.T) {
	for _, n := range []int{2, emptyReused + 1} {
		d := newConntrackDebt()
		var c dataplane.FamilyChanges
		c.Endpoints.Ports = sets.New[servicemodel.PortName]()
		for i := range n {
			c.Endpoints.Ports.Insert(servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("svc", i)}, Protocol: v1.ProtocolUDP})
		}
		d.add(c)
		if got := d.len(); got != n {
			t.Fatalf("%d ports: debt of %d", n, got)
		}
		d.clear()
		if got := d.len(); got != 0 {
			t.Fatalf("%d ports: cleared debt of %d", n, got)
		}
		again := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "again"}, Protocol: v1.ProtocolSCTP}
		d.add(dataplane.FamilyChanges{Services: servicemodel.Changes{Ports: sets.New(again)}})
		st := &dataplane.State{Family: v1.IPv4Protocol, Services: servicemodel.NewMap(&servicemodel.ServicePort{Name: again, Protocol: v1.ProtocolSCTP})}
		if diff := cmp.Diff([]servicemodel.PortName{again}, d.flows(v1.IPv4Protocol, st).Ports); diff != "" {
			t.Errorf("%d ports: debt after clearing (-want +got):\n%s", n, diff)
		}
	}
}
