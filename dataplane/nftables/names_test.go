package nftables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"sigs.k8s.io/knftables"
)

// TestLongNames programs ports whose names are up to as long as the API
// server accepts (63 characters each, a base of 196 bytes): every object
// name and comment fits what nft and the kernel hold, a port whose base is
// too long for a comment has chains of its own (not a shared one, and an
// "unserved-" chain for its no-endpoint elements), and the table's
// reading names every port, whatever its comments lost.
func TestLongNames(t *testing.T) {
	label := func(word string, n int) string { return word + strings.Repeat("x", n-len(word)) }
	ns := label("namespace", 63)
	for _, tc := range []struct {
		name          string
		ns, svc, port string
		// wantShared: the served port's service-ips element goes to a
		// shared chain; wantUnserved: the unserved port's elements go
		// to a chain of its own.
		wantShared, wantUnserved bool
	}{
		{name: "short", ns: "ns", svc: "svc", port: "p", wantShared: true},
		{name: "upstream e2e's port name", ns: "services-1234", svc: "mutable-named-port", port: "mutable-named-port", wantShared: true},
		// ns + "/" + svc + "/tcp/" + port
		{name: "base of 128 bytes", ns: ns, svc: label("service", 30), port: label("port", 29), wantShared: true},
		{name: "base of 129 bytes", ns: ns, svc: label("service", 30), port: label("port", 30), wantUnserved: true},
		{name: "every name of 63", ns: ns, svc: label("service", 63), port: label("port", 63), wantUnserved: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served, unserved := tc.port, "u"+tc.port[1:]
			b := newBuilder()
			b.UpdateService(nil, dataplanetest.MakeService(tc.ns, tc.svc, func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ClusterIP = "172.30.0.1"
				s.Spec.Ports = []v1.ServicePort{
					dataplanetest.ServicePort(served, v1.ProtocolTCP, 80, 0, 0),
					dataplanetest.ServicePort(unserved, v1.ProtocolTCP, 81, 30001, 0),
				}
			}))
			b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice(tc.ns, tc.svc, 1, func(s *discovery.EndpointSlice) {
				s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort(served, v1.ProtocolTCP, 80)}
				s.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint("10.1.0.1", "node2")}
			}))
			fake := knftables.NewFake(knftables.IPv4Family, "proxykit")
			var skipped []string
			d, err := New(Config{NFT: fake, OnSkip: func(reason string) { skipped = append(skipped, reason) }})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Sync(context.Background(), b.Build().States[0]); err != nil {
				t.Fatal(err)
			}
			if len(skipped) > 0 {
				t.Errorf("skipped: %q", skipped)
			}

			tbl := fake.Table
			for name := range tbl.Chains {
				if len(name) >= knftables.NameLengthMax {
					t.Errorf("chain name of %d bytes: %s", len(name), name)
				}
			}
			var shared, ownUnserved []string
			for name, m := range tbl.Maps {
				for _, e := range m.Elements {
					if e.Comment != nil && len(*e.Comment) > knftables.CommentLengthMax {
						t.Errorf("map %s: comment of %d bytes: %s", name, len(*e.Comment), *e.Comment)
					}
					v := strings.Join(e.Value, " ")
					if name == mapServiceIPs && strings.HasPrefix(v, "goto "+prefixSharedChain) {
						shared = append(shared, v)
					}
					if (name == mapNoEndpointServices || name == mapNoEndpointNodePort) && strings.HasPrefix(v, "goto "+prefixUnserved) {
						ownUnserved = append(ownUnserved, v)
					}
				}
			}
			if got := len(shared) > 0; got != tc.wantShared {
				t.Errorf("served port in a shared chain: %v, want %v", got, tc.wantShared)
			}
			if tc.wantUnserved && len(ownUnserved) != 2 || !tc.wantUnserved && len(ownUnserved) > 0 {
				t.Errorf("no-endpoint elements to a chain of the port: %q, want 2: %v", ownUnserved, tc.wantUnserved)
			}

			rs := &Ruleset{t: tbl}
			want := []servicemodel.PortName{
				dataplanetest.PortName(tc.ns, tc.svc, served, v1.ProtocolTCP),
				dataplanetest.PortName(tc.ns, tc.svc, unserved, v1.ProtocolTCP),
			}
			if diff := cmp.Diff(want, rs.Services()); diff != "" {
				t.Errorf("Services (-want +got):\n%s", diff)
			}
			for _, c := range []struct {
				dst  string
				want servicemodel.PortName
			}{{"172.30.0.1:80", want[0]}, {"172.30.0.1:81", want[1]}, {dataplanetest.NodeIP + ":30001", want[1]}} {
				p := dataplanetest.MakePacket(dataplane.FromLocalPod, "10.0.0.2", c.dst, v1.ProtocolTCP)
				v, _, err := rs.Trace(p, []netip.Addr{netip.MustParseAddr(dataplanetest.NodeIP)})
				if err != nil || v.Service != c.want {
					t.Errorf("Trace to %s: %v, %v; want the service %v", c.dst, v, err, c.want)
				}
			}
		})
	}
}

// TestLongNameUnservedChainGoes follows a long-named port from no
// endpoints (its no-endpoint elements going to its "unserved-" chain) to
// some and back: the chain is emptied once nothing goes to it, is back
// when the endpoints go, and the port is named all along.
func TestLongNameUnservedChainGoes(t *testing.T) {
	label := func(word string) string { return word + strings.Repeat("x", 63-len(word)) }
	ns, svc, port := label("namespace"), label("service"), label("port")
	b := newBuilder()
	b.UpdateService(nil, dataplanetest.MakeService(ns, svc, func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.ClusterIP = "172.30.0.1"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort(port, v1.ProtocolTCP, 80, 30001, 0)}
	}))
	withEndpoints := dataplanetest.MakeSlice(ns, svc, 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort(port, v1.ProtocolTCP, 80)}
		s.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint("10.1.0.1", "node2")}
	})
	fake := knftables.NewFake(knftables.IPv4Family, "proxykit")
	d, err := New(Config{NFT: fake})
	if err != nil {
		t.Fatal(err)
	}
	want := dataplanetest.PortName(ns, svc, port, v1.ProtocolTCP)
	for i, step := range []struct {
		slice        *discovery.EndpointSlice
		want         dataplane.Action
		wantUnserved bool
	}{
		{want: dataplane.Reject, wantUnserved: true},
		{slice: withEndpoints, want: dataplane.DNAT},
		{want: dataplane.Reject, wantUnserved: true},
	} {
		if step.slice != nil {
			b.UpdateEndpointSlice(nil, step.slice)
		} else if i > 0 {
			b.UpdateEndpointSlice(withEndpoints, nil)
		}
		if err := d.Sync(context.Background(), b.Build().States[0]); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		// A chain nothing goes to is flushed, and deleted a sync later.
		unserved := 0
		for name, c := range fake.Table.Chains {
			if strings.HasPrefix(name, prefixUnserved) && len(c.Rules) > 0 {
				unserved++
			}
		}
		if got := unserved == 1; got != step.wantUnserved || unserved > 1 {
			t.Errorf("step %d: %d unserved chains, want one: %v", i, unserved, step.wantUnserved)
		}
		rs := &Ruleset{t: fake.Table}
		v, _, err := rs.Trace(dataplanetest.MakePacket(dataplane.FromOutside, dataplanetest.ExternalClient, dataplanetest.NodeIP+":30001", v1.ProtocolTCP),
			[]netip.Addr{netip.MustParseAddr(dataplanetest.NodeIP)})
		if err != nil || v.Action != step.want || v.Service != want {
			t.Errorf("step %d: Trace to the node port: %v, %v; want %v of the port", i, v, err, step.want)
		}
	}
}
