package customdataplane_test

import (
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/examples/customdataplane"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// TestPartialSync checks that after each change the Dataplane rewrites
// only the services that changed, and ends with the table a fresh
// Dataplane writes for the same State.
func TestPartialSync(t *testing.T) {
	svc := func(name, ip string, nodePort int32) *v1.Service {
		return dataplanetest.MakeService("ns", name, func(s *v1.Service) {
			s.Spec.ClusterIP = ip
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("http", v1.ProtocolTCP, 80, nodePort, 8080)}
		})
	}
	slice := func(name string, ips ...string) *discovery.EndpointSlice {
		return dataplanetest.MakeSlice("ns", name, 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("http", v1.ProtocolTCP, 8080)}
			for _, ip := range ips {
				s.Endpoints = append(s.Endpoints, dataplanetest.ReadyEndpoint(ip, "other-node"))
			}
		})
	}
	a, b := svc("a", "172.30.0.1", 30001), svc("b", "172.30.0.2", 30002)
	sliceA, sliceB := slice("a", "10.0.1.1", "10.0.1.2"), slice("b", "10.0.2.1")

	builder := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName, Settings: dataplanetest.DefaultSettings()})
	builder.UpdateNode(dataplanetest.TestNode(nil))
	for _, s := range []*v1.Service{a, b} {
		builder.UpdateService(nil, s)
	}
	for _, s := range []*discovery.EndpointSlice{sliceA, sliceB} {
		builder.UpdateEndpointSlice(nil, s)
	}
	dp := customdataplane.New()
	if err := dp.Sync(t.Context(), builder.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	if got, want := dp.LastSync(), (dataplane.SyncReport{Full: true, Services: 2}); got != want {
		t.Errorf("first Sync: LastSync() = %+v, want %+v", got, want)
	}

	for _, c := range []struct {
		name   string
		change func()
	}{
		{"endpoint removed", func() { builder.UpdateEndpointSlice(sliceA, slice("a", "10.0.1.2")) }},
		{"cluster IP and node port changed", func() { builder.UpdateService(b, svc("b", "172.30.0.3", 30003)) }},
		{"service deleted", func() { builder.UpdateService(a, nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.change()
			st := builder.Build().States[0]
			if err := dp.Sync(t.Context(), st); err != nil {
				t.Fatal(err)
			}
			if got, want := dp.LastSync(), (dataplane.SyncReport{Services: 1}); got != want {
				t.Errorf("LastSync() = %+v, want %+v", got, want)
			}
			fresh := customdataplane.New()
			if err := fresh.Sync(t.Context(), st); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(serve(t, fresh), serve(t, dp)); d != "" {
				t.Errorf("table after a partial sync differs from a full sync's (-full +partial):\n%s", d)
			}
		})
	}
}

func serve(t *testing.T, dp *customdataplane.Dataplane) string {
	t.Helper()
	rec := httptest.NewRecorder()
	dp.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	return rec.Body.String()
}
