package ipvs

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// procTable is /proc/net/ip_vs as the kernel lists n IPv4 virtual servers
// of eps real servers each, with the connection counters given.
func procTable(n, eps, active int) []byte {
	var b strings.Builder
	b.WriteString("IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n")
	for i := range n {
		fmt.Fprintf(&b, "TCP  0A60%04X:0050 rr\n", i)
		for j := range eps {
			fmt.Fprintf(&b, "  -> 0A%02X%04X:1F90      Masq    1      %d          %d\n", j, i, active, active)
		}
	}
	b.WriteString("TCP  [FD00:0000:0000:0000:0000:0000:0000:000A]:0050 rr\n  -> [FD00:0000:0000:0000:0000:0000:0001:0001]:1F90      Masq    1      0          0\n")
	return []byte(b.String())
}

// tableTotal is the sum of the fingerprints scanTable finds in text.
func tableTotal(text []byte, ipv6 bool) (sum uint64, n int) {
	scanTable(text, ipv6, func(_ vsKey, s uint64) { sum, n = sum+s, n+1 })
	return sum, n
}

// TestTableSum: the fingerprint ignores the connection counters and the
// other family's virtual servers, and follows a weight, a real server or
// a virtual server.
func TestTableSum(t *testing.T) {
	sum := func(text string, ipv6 bool) uint64 {
		t.Helper()
		s, n := tableTotal([]byte(text), ipv6)
		if n == 0 {
			t.Fatalf("no virtual server read in %q", text)
		}
		return s
	}
	base := string(procTable(3, 2, 0))
	for _, tc := range []struct {
		name       string
		text       string
		ipv6, same bool
	}{
		{"counters moved", string(procTable(3, 2, 7)), false, true},
		{"weight changed", strings.Replace(base, "Masq    1", "Masq    0", 1), false, false},
		{"real server deleted", strings.Replace(base, "  -> 0A000000:1F90      Masq    1      0          0\n", "", 1), false, false},
		{"virtual server added", base + "UDP  0A600099:0035 rr\n", false, false},
		{"IPv6 real server deleted, IPv4 fingerprint", strings.Replace(base, "  -> [FD00:0000:0000:0000:0000:0000:0001:0001]:1F90      Masq    1      0          0\n", "", 1), false, true},
		{"IPv6 real server deleted, IPv6 fingerprint", strings.Replace(base, "  -> [FD00:0000:0000:0000:0000:0000:0001:0001]:1F90      Masq    1      0          0\n", "", 1), true, false},
		{"IPv4 virtual server added, IPv6 fingerprint", base + "UDP  0A600099:0035 rr\n", true, true},
	} {
		if got := sum(tc.text, tc.ipv6) == sum(base, tc.ipv6); got != tc.same {
			t.Errorf("%s: same fingerprint = %v, want %v", tc.name, got, tc.same)
		}
	}
}

// BenchmarkTableSum is the canary's fingerprint of a table of 10,000
// virtual servers of 10 real servers, once the kernel listed it (reading
// /proc/net/ip_vs in the kernel is BenchmarkKernelChanged's).
func BenchmarkTableSum(b *testing.B) {
	text := procTable(10000, 10, 3)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, n := tableTotal(text, false); n != 10000 {
			b.Fatal(n)
		}
	}
}

// TestCanarySurvivesPartialSync: another program's change made between
// two canary polls is still reported after a partial sync (one endpoint
// of another service changed) came in between, and no longer after the
// Reconcile that repairs it; a sync with nothing foreign to find leaves
// the canary quiet.
func TestCanarySurvivesPartialSync(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		disturb func(t *testing.T, f fakes)
		want    bool
	}{
		{"nothing", func(*testing.T, fakes) {}, false},
		{"virtual server deleted", func(t *testing.T, f fakes) {
			t.Helper()
			svcs, err := f.ipvs.GetServices()
			if err != nil || len(svcs) == 0 {
				t.Fatal(len(svcs), err)
			}
			if err := f.ipvs.DelService(svcs[len(svcs)-1]); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"foreign rule in the services chain", func(t *testing.T, f fakes) {
			t.Helper()
			in := "*nat\n-I " + DefaultPrefix + "-SERVICES 1 -j RETURN\nCOMMIT\n"
			if err := f.runner.Restore(ctx, xtables.RestoreBytes(in)); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, f := newFakeDataplane(t, Config{Family: v1.IPv4Protocol})
			c, st := newCluster(4, 2, v1.ProtocolTCP)
			if err := d.Sync(ctx, st); err != nil {
				t.Fatal(err)
			}
			tc.disturb(t, f)
			if err := d.Sync(ctx, c.withoutEndpoint(0, 0)); err != nil {
				t.Fatal(err)
			}
			if rep := d.LastSync(); rep.Full {
				t.Fatalf("the endpoint change made a full sync: %+v", rep)
			}
			changed, err := d.KernelChanged(ctx)
			if err != nil || changed != tc.want {
				t.Fatalf("KernelChanged after the partial sync = %v, %v; want %v", changed, err, tc.want)
			}
			if _, err := d.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if changed, err := d.KernelChanged(ctx); err != nil || changed {
				t.Errorf("KernelChanged after Reconcile = %v, %v; want false", changed, err)
			}
		})
	}
}

// TestCanaryQuietAfterUnrelatedCommit: a partial sync that rewrites the
// dataplane's own chains after someone else committed something unrelated
// (which moves the namespace's generation) leaves the canary quiet: only
// a change to what the dataplane owns is reported.
func TestCanaryQuietAfterUnrelatedCommit(t *testing.T) {
	ctx := context.Background()
	d, f := newFakeDataplane(t, Config{Family: v1.IPv4Protocol})
	c, st := newCluster(4, 2, v1.ProtocolTCP)
	if err := d.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := f.runner.Restore(ctx, xtables.RestoreBytes("*filter\n:UNRELATED - [0:0]\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	c.b.UpdateService(nil, dataplanetest.MakeService("ns9", "local", func(s *v1.Service) {
		s.Spec.ClusterIP = "172.30.9.9"
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, 31999, 8080)}
	}))
	c.b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice("ns9", "local", 0, func(sl *discovery.EndpointSlice) {
		sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 8080)}
		sl.Endpoints = append(sl.Endpoints, dataplanetest.ReadyEndpoint("10.9.9.9", dataplanetest.NodeName))
	}))
	if err := d.Sync(ctx, c.b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	if ch, err := d.KernelChanged(ctx); err != nil || ch {
		t.Errorf("KernelChanged after partial sync = %v, %v; want false", ch, err)
	}
}
