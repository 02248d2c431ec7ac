package proxykit

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
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
