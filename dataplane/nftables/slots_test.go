package nftables

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

func TestSlotTable(t *testing.T) {
	type step struct {
		do   string // "alloc", "take N", "release N"
		want int32  // alloc's slot; take's result as 1 or 0
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"allocations count up", []step{{"alloc", 0}, {"alloc", 1}, {"alloc", 2}}},
		{"the lowest free slot first", []step{{"alloc", 0}, {"alloc", 1}, {"alloc", 2}, {"release 1", 0}, {"release 0", 0}, {"alloc", 0}, {"alloc", 1}, {"alloc", 3}}},
		{"a taken slot leaves the ones below free", []step{{"take 3", 1}, {"alloc", 0}, {"alloc", 1}, {"alloc", 2}, {"alloc", 4}}},
		{"a slot is taken once", []step{{"take 2", 1}, {"take 2", 0}, {"alloc", 0}, {"take 0", 0}, {"take 1", 1}, {"alloc", 3}}},
		{"releasing a free slot changes nothing", []step{{"release 5", 0}, {"alloc", 0}, {"release 0", 0}, {"release 0", 0}, {"alloc", 0}, {"alloc", 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var st slotTable
			var got, want []int32
			for _, s := range tc.steps {
				var n int32
				if s.do == "alloc" {
					got, want = append(got, st.alloc(7)), append(want, s.want)
				} else if _, err := fmt.Sscanf(s.do, "take %d", &n); err == nil {
					r := int32(0)
					if st.take(7, n) {
						r = 1
					}
					got, want = append(got, r), append(want, s.want)
				} else if _, err := fmt.Sscanf(s.do, "release %d", &n); err == nil {
					st.release(7, n)
				} else {
					t.Fatalf("bad step %q", s.do)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if st.inUse(6) {
				t.Error("another shard is in use")
			}
		})
	}
}

func TestShardNames(t *testing.T) {
	for i := range mapCount {
		name := shardName(i)
		if got, ok := shardIndex(name); !ok || got != i {
			t.Fatalf("shardIndex(%q) = %d, %v, want %d", name, got, ok, i)
		}
		if len(name) > knftables.NameLengthMax {
			t.Fatalf("%q is too long", name)
		}
	}
	for _, name := range []string{"dnat-tcp-400", "dnat-tcp-0", "dnat-icmp-001", "dnat-tcp-00A", "dnat-tcp-+01", "service-ips", "dnat-", "dnat-udp"} {
		if i, ok := shardIndex(name); ok {
			t.Errorf("shardIndex(%q) = %d, want none", name, i)
		}
	}
	if _, ok := shardOf("service-X", "icmp"); ok {
		t.Error("an ICMP chain has an endpoint map")
	}
	for _, sig := range []string{"pk:abc", "pk:abc@", "pk:abc@-1", "pk:abc@65536", "pk:abc@x"} {
		if s, ok := slotOfSig(sig); ok {
			t.Errorf("slotOfSig(%q) = %d, want none", sig, s)
		}
	}
	if s, ok := slotOfSig("pk:abc@65535"); !ok || s != 65535 {
		t.Errorf("slotOfSig(pk:abc@65535) = %d, %v", s, ok)
	}
}

func TestSharedNames(t *testing.T) {
	for i := range sharedMapCount {
		name := sharedMapName(i)
		if got, ok := sharedIndex(name); !ok || got != i {
			t.Fatalf("sharedIndex(%q) = %d, %v, want %d", name, got, ok, i)
		}
		for _, n := range []int{1, 10, maxEndpoints} {
			chain := sharedChainName(i, n)
			if s, m, ok := sharedChainOf(chain); !ok || s != i || m != n {
				t.Fatalf("sharedChainOf(%q) = %d, %d, %v, want %d, %d", chain, s, m, ok, i, n)
			}
			if len(chain) > knftables.NameLengthMax || !isSharedChain(chain) || isServiceChain(chain) {
				t.Fatalf("%q is not a shared chain name", chain)
			}
		}
	}
	for _, name := range []string{"cluster-endpoints-tcp-40", "cluster-endpoints-tcp-0", "cluster-endpoints-icmp-01", "cluster-endpoints-tcp-0A", "cluster-endpoints-", "dnat-tcp-000"} {
		if i, ok := sharedIndex(name); ok {
			t.Errorf("sharedIndex(%q) = %d, want none", name, i)
		}
	}
	for _, name := range []string{"cluster-dnat-tcp-00-0", "cluster-dnat-tcp-00-65537", "cluster-dnat-tcp-00-01", "cluster-dnat-tcp-00", "cluster-dnat-tcp-40-1", "cluster-dnat-"} {
		if i, n, ok := sharedChainOf(name); ok {
			t.Errorf("sharedChainOf(%q) = %d, %d, want none", name, i, n)
		}
	}
	if _, ok := sharedShard("10.0.0.1 . 80", "icmp"); ok {
		t.Error("an ICMP destination has a shared map")
	}
}

// sameShard returns three services, in name order, whose chains share an
// endpoint map.
func sameShard(t *testing.T) (a, b, c int) {
	t.Helper()
	seen := map[int][]int{}
	for n := range 100000 {
		shard, _ := shardOf(prefixService+hashedName(fmt.Sprintf("ns/svc%d/tcp/p80", n)), "tcp")
		seen[shard] = append(seen[shard], n)
		if l := seen[shard]; len(l) == 3 {
			slices.SortFunc(l, func(x, y int) int { return strings.Compare(fmt.Sprint("svc", x), fmt.Sprint("svc", y)) })
			return l[0], l[1], l[2]
		}
	}
	t.Fatal("no three services share a shard")
	return
}

// TestRestartKeepsSlots: after partial syncs placed chains at slots a
// fresh render would not give them, a restarted Dataplane finds them
// through their comments and rewrites nothing but the fixed part.
func TestRestartKeepsSlots(t *testing.T) {
	a, bb, c := sameShard(t)
	b := newBuilder()
	add := func(n int) {
		b.UpdateService(nil, nodePortService(n))
		b.UpdateEndpointSlice(nil, slice(n, 3, 0))
	}
	fake := newFake(false)
	d, _ := testDataplane(t, fake)
	add(a)
	add(bb)
	if err := d.Sync(t.Context(), b.Build().States[0]); err != nil {
		t.Fatal(err)
	}
	// a leaves slot 0 to c, b keeps slot 1: a fresh render would give b 0.
	b.UpdateService(nodePortService(a), nil)
	b.UpdateEndpointSlice(slice(a, 3, 0), nil)
	add(c)
	s := b.Build().States[0]
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if d.Stats().Full {
		t.Fatal("the second sync was full")
	}
	dump := fake.Dump()
	for _, want := range []string{"ns/svc" + fmt.Sprint(bb) + "/tcp/p80 meta l4proto tcp dnat ip addr . port to numgen random mod 3 offset 65536 ",
		"ns/svc" + fmt.Sprint(c) + "/tcp/p80 meta l4proto tcp dnat ip addr . port to numgen random mod 3 offset 0 "} {
		if !strings.Contains(dump, want) {
			t.Fatalf("no rule %q in\n%s", want, dump)
		}
	}

	restarted := newFake(false)
	if err := restarted.ParseDump(dump); err != nil {
		t.Fatal(err)
	}
	d2, _ := testDataplane(t, restarted)
	if err := d2.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	static := staticOps(d2, s)
	if got, want := d2.Stats().Operations, static; got != want {
		t.Errorf("first sync after a restart: %d operations, want the %d of the fixed part:\n%s", got, want, restarted.LastTransaction)
	}
	if diff := cmp.Diff(strings.Split(dump, "\n"), strings.Split(restarted.Dump(), "\n")); diff != "" {
		t.Errorf("the restart changed the table (-before +after):\n%s", diff)
	}
}
