package nftables

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"sigs.k8s.io/knftables"
)

// dumpLines is the fake's table, one line per object, sorted.
func dumpLines(fake *knftables.Fake) []string {
	lines := strings.Split(strings.TrimSpace(fake.Dump()), "\n")
	slices.Sort(lines)
	return lines
}

// staticOps is how many operations the fixed part of s's table takes in a
// first full sync: all a restart finding the table in place sends.
func staticOps(d *Dataplane, s *dataplane.State) int {
	var p plan
	d.writeStatic(&p, d.static(s), true)
	return len(p.ops)
}

// freshDump is the table a new dataplane writes for s into an empty fake.
func freshDump(t *testing.T, s *dataplane.State) []string {
	t.Helper()
	fake := newFake(false)
	d, _ := testDataplane(t, fake)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return dumpLines(fake)
}

// TestSyncOperations follows a cluster through changes and checks that
// each sync sends only a handful of operations, and that the table then
// equals what a full sync into an empty table writes.
func TestSyncOperations(t *testing.T) {
	fake := newFake(false)
	d, clk := testDataplane(t, fake)
	b := newBuilder()
	for n := range 20 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 3, 1))
	}
	first := b.Build().States[0]
	if err := d.Sync(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); !st.Full || st.Services != 20 {
		t.Fatalf("first Sync: %+v, want a full one of 20 services", st)
	}

	svc20 := clusterIPService(20)
	steps := []struct {
		name   string
		change func()
		// ops is the operations of the sync's main transaction.
		ops int
	}{
		{"idle resync", func() {}, 0},
		// cluster-ips, service-ips, hairpin elements; a shared map, new,
		// and the shared chain of one endpoint, new, with its rule; the
		// endpoint's element.
		{"new service with one local endpoint", func() {
			b.UpdateService(nil, svc20)
			b.UpdateEndpointSlice(nil, slice(20, 0, 1))
		}, 7},
		// Elements only: the moved endpoint's element deleted and added.
		{"one remote endpoint moved", func() { b.UpdateEndpointSlice(slice(3, 3, 1), moved(slice(3, 3, 1))) }, 2},
		{"and moved back", func() { b.UpdateEndpointSlice(moved(slice(3, 3, 1)), slice(3, 3, 1)) }, 2},
		// The port moves to the shared chain of three endpoints (new in
		// its map: add, rule) by its service-ips element (delete, add);
		// of its endpoints, the last two deleted and the one that moved
		// up added; the chain of four, now unused, flushed.
		{"one remote endpoint removed", func() { b.UpdateEndpointSlice(slice(3, 3, 1), slice(3, 2, 1)) }, 8},
		// Back to the chain of four (new again: add, rule) by its
		// service-ips element, the hairpin element of the new local one
		// and its endpoint element; the chain of three flushed.
		{"one local endpoint added", func() { b.UpdateEndpointSlice(slice(3, 2, 1), slice(3, 2, 2)) }, 7},
		// service-ips deleted, no-endpoint-services added, hairpins
		// deleted, the four endpoint elements deleted, the shared chain
		// flushed and the map, now unused, deleted.
		{"endpoints emptied", func() { b.UpdateEndpointSlice(slice(3, 2, 2), slice(3, 0, 0)) }, 10},
		// The reverse: the map and chain re-created.
		{"endpoints restored", func() { b.UpdateEndpointSlice(slice(3, 0, 0), slice(3, 2, 2)) }, 11},
		// Four elements and the shared chain flushed; the map, unused,
		// deleted.
		{"service deleted", func() { b.UpdateService(svc20, nil); b.UpdateEndpointSlice(slice(20, 0, 1), nil) }, 6},
		{"idle resync after all that", func() {}, 0},
	}
	for _, step := range steps {
		step.change()
		s := b.Build().States[0]
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if st := d.Stats(); st.Full || st.Operations != step.ops {
			t.Errorf("%s: full %v, %d operations, want a partial sync of %d:\n%s", step.name, st.Full, st.Operations, step.ops, fake.LastTransaction)
		}
		// Let the stale chains go, then compare.
		clk.Step(2 * time.Second)
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatalf("%s: resync: %v", step.name, err)
		}
		if st := d.Stats(); st.Operations != 0 {
			t.Errorf("%s: resync sent %d operations", step.name, st.Operations)
		}
		if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
			t.Errorf("%s: the table differs from a fresh full sync (-fresh +got):\n%s", step.name, diff)
		}
	}
}

// TestRestartConverges preloads the fake with what an earlier run left,
// plus damage, and checks that the first sync changes only the difference.
func TestRestartConverges(t *testing.T) {
	b := newBuilder()
	for n := range 10 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 2, 1))
	}
	s := b.Build().States[0]
	before := newFake(false)
	old, _ := testDataplane(t, before)
	if err := old.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	dump := before.Dump()

	fake := newFake(false)
	if err := fake.ParseDump(dump); err != nil {
		t.Fatal(err)
	}
	// Damage: one element missing, one shared chain emptied, one chain
	// of a service that no longer exists, an endpoint map element gone
	// and one foreign.
	tx := fake.NewTransaction()
	tx.Delete(&knftables.Element{Set: setClusterIPs, Key: []string{"172.30.0.3"}})
	lost := firstEndpointElement(t, fake)
	tx.Delete(lost)
	tx.Add(&knftables.Element{Map: lost.Map, Key: []string{"172.30.9.9 . 80 . 0"}, Value: []string{"10.9.9.9 . 80"}})
	// Every port has three endpoints: the shared chain of three in the
	// lost element's map is used.
	shard, _ := sharedIndex(lost.Map)
	victim := sharedChainName(shard, 3)
	tx.Flush(&knftables.Chain{Name: victim})
	tx.Add(&knftables.Chain{Name: prefixService + hashedName("ns/gone/tcp/p80")})
	tx.Add(&knftables.Rule{Chain: prefixService + hashedName("ns/gone/tcp/p80"), Rule: "meta l4proto tcp dnat to 10.9.9.9:80"})
	if err := fake.Run(t.Context(), tx); err != nil {
		t.Fatal(err)
	}

	d, clk := testDataplane(t, fake)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	static := staticOps(d, s)
	// One element added, the emptied chain rewritten (add, rule), the
	// foreign chain flushed; in the endpoint maps, which are listed, the
	// lost element added back and the foreign one deleted.
	if got, want := d.Stats().Operations, static+6; got != want {
		t.Errorf("first sync after restart: %d operations, want %d (%d of them the fixed part):\n%s", got, want, static, fake.LastTransaction)
	}
	clk.Step(2 * time.Second)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
}

// TestFullRuleset pins the complete table of a small cluster: a
// LoadBalancer with source ranges and externalTrafficPolicy Local, a
// ClusterIP service with ClientIP affinity, and one without endpoints.
func TestFullRuleset(t *testing.T) {
	b := newBuilder()
	b.UpdateService(nil, dataplanetest.MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP = "172.30.0.41"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, 3001, 0)}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "1.2.3.4"}}
		s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25"}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}))
	b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice("ns1", "svc1", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 80)}
		s.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint("10.180.0.1", dataplanetest.NodeName), dataplanetest.ReadyEndpoint("10.180.2.1", "node2")}
	}))
	b.UpdateService(nil, dataplanetest.MakeService("ns2", "svc2", func(s *v1.Service) {
		s.Spec.ClusterIP = "172.30.0.42"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p53", v1.ProtocolUDP, 53, 0, 0)}
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	}))
	b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice("ns2", "svc2", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p53", v1.ProtocolUDP, 5353)}
		s.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint("10.180.3.1", "node2"), dataplanetest.ReadyEndpoint("10.180.4.1", "node2")}
	}))
	b.UpdateService(nil, clusterIPService(6))
	s := b.Build().States[0]

	fake := newFake(false)
	d, _ := testDataplane(t, fake)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(fullRuleset), "\n")
	slices.Sort(want)
	if diff := cmp.Diff(want, dumpLines(fake)); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

const fullRuleset = `
add table ip proxykit { comment "rules for proxykit" ; }
add chain ip proxykit cluster-ips-check
add chain ip proxykit endpoint-C2G7NUTA-ns2/svc2/udp/p53__10.180.4.1/5353
add chain ip proxykit endpoint-RAKU3TPU-ns2/svc2/udp/p53__10.180.3.1/5353
add chain ip proxykit external-ULMVA6XW-ns1/svc1/tcp/p80
add chain ip proxykit filter-forward { type filter hook forward priority 0 ; }
add chain ip proxykit filter-input { type filter hook input priority 0 ; }
add chain ip proxykit filter-output { type filter hook output priority 0 ; }
add chain ip proxykit filter-output-pre-dnat { type filter hook output priority -110 ; }
add chain ip proxykit filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }
add chain ip proxykit firewall-ULMVA6XW-ns1/svc1/tcp/p80
add chain ip proxykit firewall-check
add chain ip proxykit local-ULMVA6XW-ns1/svc1/tcp/p80
add chain ip proxykit masquerading
add chain ip proxykit nat-output { type nat hook output priority -100 ; }
add chain ip proxykit nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip proxykit nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip proxykit nodeport-endpoints-check
add chain ip proxykit reject-chain
add chain ip proxykit service-ULMVA6XW-ns1/svc1/tcp/p80
add chain ip proxykit service-VITOD6J3-ns2/svc2/udp/p53
add chain ip proxykit service-endpoints-check
add chain ip proxykit services
add set ip proxykit affinity-CF7EZ53B-ns2/svc2/udp/p53__10.180.4.1/5353/10800s { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add set ip proxykit affinity-YKKJRTXW-ns2/svc2/udp/p53__10.180.3.1/5353/10800s { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add set ip proxykit cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }
add set ip proxykit hairpin-connections { type ipv4_addr . ipv4_addr . inet_proto . inet_service ; comment "service hairpin connections" ; }
add map ip proxykit firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
add map ip proxykit no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }
add map ip proxykit no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }
add map ip proxykit service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add map ip proxykit service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }
add rule ip proxykit cluster-ips-check ip daddr @cluster-ips reject
add rule ip proxykit endpoint-C2G7NUTA-ns2/svc2/udp/p53__10.180.4.1/5353 update @affinity-CF7EZ53B-ns2/svc2/udp/p53__10.180.4.1/5353/10800s { ip saddr } comment "pk:gnzyzi5jmrsh"
add rule ip proxykit endpoint-C2G7NUTA-ns2/svc2/udp/p53__10.180.4.1/5353 meta l4proto udp dnat to 10.180.4.1:5353
add rule ip proxykit endpoint-RAKU3TPU-ns2/svc2/udp/p53__10.180.3.1/5353 update @affinity-YKKJRTXW-ns2/svc2/udp/p53__10.180.3.1/5353/10800s { ip saddr } comment "pk:2584ixsmcm2a0"
add rule ip proxykit endpoint-RAKU3TPU-ns2/svc2/udp/p53__10.180.3.1/5353 meta l4proto udp dnat to 10.180.3.1:5353
add rule ip proxykit external-ULMVA6XW-ns1/svc1/tcp/p80 ip saddr 10.0.0.0/8 goto service-ULMVA6XW-ns1/svc1/tcp/p80 comment "pk:118ee31bdxyzo"
add rule ip proxykit external-ULMVA6XW-ns1/svc1/tcp/p80 fib saddr type local mark set mark or 0x4000
add rule ip proxykit external-ULMVA6XW-ns1/svc1/tcp/p80 fib saddr type local goto service-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip proxykit external-ULMVA6XW-ns1/svc1/tcp/p80 goto local-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip proxykit filter-forward ct state new jump service-endpoints-check
add rule ip proxykit filter-forward ct state new jump cluster-ips-check
add rule ip proxykit filter-input ct state new jump nodeport-endpoints-check
add rule ip proxykit filter-input ct state new jump service-endpoints-check
add rule ip proxykit filter-output ct state new jump service-endpoints-check
add rule ip proxykit filter-output ct state new jump cluster-ips-check
add rule ip proxykit filter-output-pre-dnat ct state new jump firewall-check
add rule ip proxykit filter-prerouting-pre-dnat ct state new jump firewall-check
add rule ip proxykit firewall-ULMVA6XW-ns1/svc1/tcp/p80 ip saddr != { 203.0.113.0/25 } drop comment "pk:86hh9t3t7u61"
add rule ip proxykit firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips
add map ip proxykit dnat-tcp-1c3 { typeof numgen random mod 1 : ip daddr . tcp dport ; comment "service endpoints by numgen value" ; }
add rule ip proxykit local-ULMVA6XW-ns1/svc1/tcp/p80 meta l4proto tcp dnat ip addr . port to numgen random mod 1 offset 0 map @dnat-tcp-1c3 comment "pk:vzyxyviplpv4@0"
add element ip proxykit dnat-tcp-1c3 { 0 : 10.180.0.1 . 80 }
add map ip proxykit dnat-tcp-3af { typeof numgen random mod 1 : ip daddr . tcp dport ; comment "service endpoints by numgen value" ; }
add element ip proxykit dnat-tcp-3af { 0 : 10.180.0.1 . 80 }
add element ip proxykit dnat-tcp-3af { 1 : 10.180.2.1 . 80 }
add rule ip proxykit service-ULMVA6XW-ns1/svc1/tcp/p80 meta l4proto tcp dnat ip addr . port to numgen random mod 2 offset 0 map @dnat-tcp-3af comment "pk:1ubhn5qlzh6qc@0"
add rule ip proxykit masquerading mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random
add rule ip proxykit masquerading ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
add rule ip proxykit nat-output jump services
add rule ip proxykit nat-postrouting jump masquerading
add rule ip proxykit nat-prerouting jump services
add rule ip proxykit nodeport-endpoints-check ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ip proxykit reject-chain reject
add rule ip proxykit service-VITOD6J3-ns2/svc2/udp/p53 ip saddr @affinity-YKKJRTXW-ns2/svc2/udp/p53__10.180.3.1/5353/10800s goto endpoint-RAKU3TPU-ns2/svc2/udp/p53__10.180.3.1/5353 comment "pk:1qbodlnovp46t"
add rule ip proxykit service-VITOD6J3-ns2/svc2/udp/p53 ip saddr @affinity-CF7EZ53B-ns2/svc2/udp/p53__10.180.4.1/5353/10800s goto endpoint-C2G7NUTA-ns2/svc2/udp/p53__10.180.4.1/5353
add rule ip proxykit service-VITOD6J3-ns2/svc2/udp/p53 numgen random mod 2 vmap { 0 : goto endpoint-RAKU3TPU-ns2/svc2/udp/p53__10.180.3.1/5353 , 1 : goto endpoint-C2G7NUTA-ns2/svc2/udp/p53__10.180.4.1/5353 }
add rule ip proxykit service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule ip proxykit services ip daddr @cluster-ips ip saddr != 10.0.0.0/8 mark set mark or 0x4000
add rule ip proxykit services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip proxykit services fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports
add element ip proxykit cluster-ips { 172.30.0.41 }
add element ip proxykit cluster-ips { 172.30.0.42 }
add element ip proxykit cluster-ips { 172.30.0.7 }
add element ip proxykit hairpin-connections { 10.180.0.1 . 10.180.0.1 . tcp . 80 }
add element ip proxykit firewall-ips { 1.2.3.4 . tcp . 80 : goto firewall-ULMVA6XW-ns1/svc1/tcp/p80 }
add element ip proxykit no-endpoint-services { 172.30.0.7 . tcp . 80 comment "ns/svc6/tcp/p80" : goto reject-chain }
add element ip proxykit service-ips { 1.2.3.4 . tcp . 80 : goto external-ULMVA6XW-ns1/svc1/tcp/p80 }
add element ip proxykit service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }
add element ip proxykit service-ips { 172.30.0.42 . udp . 53 : goto service-VITOD6J3-ns2/svc2/udp/p53 }
add element ip proxykit service-nodeports { tcp . 3001 : goto external-ULMVA6XW-ns1/svc1/tcp/p80 }
`

// TestClaimedTwice: two services claim one external IP and port. The
// first by namespace and name gets it, as in State.Lookup, and when it
// goes the other takes over through an incremental sync.
func TestClaimedTwice(t *testing.T) {
	withExternalIP := func(n int) *v1.Service {
		s := clusterIPService(n)
		s.Spec.ExternalIPs = []string{"192.168.99.1"}
		return s
	}
	fake := newFake(false)
	d, _ := testDataplane(t, fake)
	b := newBuilder()
	for _, n := range []int{1, 2} {
		b.UpdateService(nil, withExternalIP(n))
		b.UpdateEndpointSlice(nil, slice(n, 1, 0))
	}
	key := "192.168.99.1 . tcp . 80"
	target := func() string {
		e := fake.Table.Maps[mapServiceIPs].FindElement(key)
		if e == nil {
			return ""
		}
		return strings.Join(e.Value, " ")
	}
	if err := d.Sync(t.Context(), b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	if got, want := target(), "goto "+prefixExternal+hashedName("ns/svc1/tcp/p80"); got != want {
		t.Errorf("with both: %s goes to %q, want %q", key, got, want)
	}
	b.UpdateService(withExternalIP(1), nil)
	s := b.Build().States[0]
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if got, want := target(), "goto "+prefixExternal+hashedName("ns/svc2/tcp/p80"); got != want || d.Stats().Full {
		t.Errorf("after deleting svc1: %s goes to %q (full sync %v), want %q by a partial sync", key, got, d.Stats().Full, want)
	}
}

// TestSplitFullSync: a full sync larger than MaxOperations is split into
// transactions that each apply, and the table equals an unsplit sync's.
func TestSplitFullSync(t *testing.T) {
	b := newBuilder()
	for n := range 30 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 3, 1))
	}
	s := b.Build().States[0]
	fake := newFake(false)
	d, err := New(Config{NFT: fake, MaxOperations: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	st := d.Stats()
	if want := (st.Operations + 9) / 10; st.Transactions != want || want < 10 {
		t.Errorf("%d operations in %d transactions, want %d", st.Operations, st.Transactions, want)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
		t.Errorf("the split sync's table differs (-unsplit +split):\n%s", diff)
	}
}

// TestAffinityTimeoutChange: nft cannot change a set's timeout, so a new
// timeout brings new affinity sets, through an incremental sync.
func TestAffinityTimeoutChange(t *testing.T) {
	sticky := func(secs int32) *v1.Service {
		s := clusterIPService(1)
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &secs}}
		return s
	}
	fake := newFake(false)
	d, clk := testDataplane(t, fake)
	b := newBuilder()
	b.UpdateService(nil, sticky(60))
	b.UpdateEndpointSlice(nil, slice(1, 2, 0))
	if err := d.Sync(t.Context(), b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	b.UpdateService(sticky(60), sticky(120))
	s := b.Build().States[0]
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if d.Stats().Full {
		t.Errorf("a timeout change made a full sync")
	}
	clk.Step(2 * time.Second)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
	if !strings.Contains(fake.Dump(), "timeout 120s") || strings.Contains(fake.Dump(), "timeout 60s") {
		t.Errorf("affinity sets after the change:\n%s", fake.Dump())
	}
}

// firstEndpointElement is the first element of the first endpoint map fake
// holds.
func firstEndpointElement(t *testing.T, fake *knftables.Fake) *knftables.Element {
	t.Helper()
	maps, err := fake.List(t.Context(), "maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		_, slotted := shardIndex(m)
		if _, shared := sharedIndex(m); !slotted && !shared {
			continue
		}
		elems, err := fake.ListElements(t.Context(), "map", m)
		if err != nil {
			t.Fatal(err)
		}
		if len(elems) > 0 {
			return &knftables.Element{Map: m, Key: elems[0].Key, Value: elems[0].Value}
		}
	}
	t.Fatal("no endpoint map element")
	return nil
}

// moved is s with its first endpoint at another address, sorting where it
// was.
func moved(s *discovery.EndpointSlice) *discovery.EndpointSlice {
	s = s.DeepCopy()
	s.Endpoints[0].Addresses = []string{strings.Replace(s.Endpoints[0].Addresses[0], ".1", ".0", 1)}
	return s
}

// TestFullSyncAfterMoves checks that a full sync of a table the Dataplane
// wrote (the full sync period ran out) writes only the endpoint map
// elements that changed, from what it remembers writing: the rule of a
// chain whose endpoint count is the same is right, and its elements are
// not listed.
func TestFullSyncAfterMoves(t *testing.T) {
	fake := newFake(false)
	d, clk := testDataplane(t, fake)
	b := newBuilder()
	for n := range 5 {
		b.UpdateService(nil, clusterIPService(n))
		b.UpdateEndpointSlice(nil, slice(n, 3, 0))
	}
	if err := d.Sync(t.Context(), b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	b.UpdateEndpointSlice(slice(2, 3, 0), moved(slice(2, 3, 0)))
	s := b.Build().States[0]
	clk.Step(2 * time.Hour)
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	var static plan
	d.writeStatic(&static, d.static(s), false)
	if st, want := d.Stats(), len(static.ops)+2; !st.Full || st.Operations != want {
		t.Errorf("full %v, %d operations, want a full sync of %d:\n%s", st.Full, st.Operations, want, fake.LastTransaction)
	}
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
}

// TestStateOfAnotherBuilder checks that a State of a new Builder that has
// the generation of the State programmed last is programmed, not taken
// for it.
func TestStateOfAnotherBuilder(t *testing.T) {
	fake := newFake(false)
	d, clk := testDataplane(t, fake)
	first, second := newBuilder(), newBuilder()
	first.UpdateService(nil, clusterIPService(1))
	first.UpdateEndpointSlice(nil, slice(1, 2, 0))
	second.UpdateService(nil, clusterIPService(2))
	second.UpdateEndpointSlice(nil, slice(2, 2, 0))
	a, b := first.Build().States[0], second.Build().States[0]
	if a.Generation != b.Generation {
		t.Fatalf("generations %d and %d: the test needs them equal", a.Generation, b.Generation)
	}
	for _, s := range []*dataplane.State{a, b, b} {
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		clk.Step(2 * time.Second) // let stale chains go
	}
	if diff := cmp.Diff(freshDump(t, b), dumpLines(fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync of the second Builder's State (-fresh +got):\n%s", diff)
	}
}

// TestRenderLeavesSyncState checks that Render, between syncs and beside
// them, changes nothing a Sync relies on: a chain left stale before it is
// still deleted, and the table ends as a fresh full sync writes it.
func TestRenderLeavesSyncState(t *testing.T) {
	fake := newFake(false)
	d, clk := testDataplane(t, fake)
	b := newBuilder()
	b.UpdateService(nil, clusterIPService(1))
	b.UpdateEndpointSlice(nil, slice(1, 2, 0))
	b.UpdateService(nil, clusterIPService(2))
	b.UpdateEndpointSlice(nil, slice(2, 3, 0))
	sync := func(s *dataplane.State) {
		t.Helper()
		if err := d.Sync(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	sync(b.Build().States[0])
	// svc1 goes: the shared chain of two endpoints is flushed, left stale.
	b.UpdateService(clusterIPService(1), nil)
	b.UpdateEndpointSlice(slice(1, 2, 0), nil)
	rendered := b.Build().States[0]
	sync(rendered)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			if _, err := d.Render(rendered); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	clk.Step(2 * time.Second)
	b.UpdateService(nil, clusterIPService(3))
	b.UpdateEndpointSlice(nil, slice(3, 1, 0))
	s := b.Build().States[0]
	sync(s)
	<-done
	if _, err := d.Render(s); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Second)
	sync(s)
	if diff := cmp.Diff(freshDump(t, s), dumpLines(fake)); diff != "" {
		t.Errorf("the table differs from a fresh full sync (-fresh +got):\n%s", diff)
	}
}
