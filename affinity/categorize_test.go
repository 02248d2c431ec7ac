package affinity

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// testEP is the smallest Endpoint: an address to name it by, plus the
// selection facts.
type testEP struct {
	Addr string
	EndpointInfo
}

// outcome is a Selection reduced to endpoint names, keeping nil apart from
// empty so that the Selection contract is checked too.
type outcome struct {
	Cluster, Local, All []string
	HasAny              bool
	Mode                string
}

func names(eps []*testEP) []string {
	if eps == nil {
		return nil
	}
	out := make([]string, 0, len(eps))
	for _, ep := range eps {
		out = append(out, ep.Addr)
	}
	return out
}

func pointers(eps []testEP) []*testEP {
	if eps == nil {
		return nil
	}
	out := make([]*testEP, len(eps))
	for i := range eps {
		out[i] = &eps[i]
	}
	return out
}

// checkFromInput fails t when a selected endpoint is not one of the input
// values itself.
func checkFromInput(t *testing.T, what string, in, got []*testEP) {
	t.Helper()
	for _, g := range got {
		found := false
		for _, e := range in {
			found = found || e == g
		}
		if !found {
			t.Errorf("%s holds %q, which is not an input endpoint", what, g.Addr)
		}
	}
}

func run(t *testing.T, eps []testEP, p Policy, node Node, opts Options) outcome {
	t.Helper()
	in := pointers(eps)
	sel := Categorize(in, p, node, opts)
	checkFromInput(t, "Cluster", in, sel.Cluster)
	checkFromInput(t, "Local", in, sel.Local)
	checkFromInput(t, "AllReachable", in, sel.AllReachable)
	return outcome{
		Cluster: names(sel.Cluster),
		Local:   names(sel.Local),
		All:     names(sel.AllReachable),
		HasAny:  sel.HasAny,
		Mode:    TopologyMode(in, p, node, opts),
	}
}

func zones(z ...string) []string { return z }
func nodes(n ...string) []string { return n }

var (
	zoneA = Node{Zone: "zone-a"}
	// etpLocal is externalTrafficPolicy: Local on a NodePort service.
	etpLocal = Policy{ExternalLocal: true, ExternallyAccessible: true}
	itpLocal = Policy{InternalLocal: true}
	none     = []string{}
	sameZone = v1.ServiceTrafficDistributionPreferSameZone
	sameNode = v1.ServiceTrafficDistributionPreferSameNode
)

// TestCategorizeUpstream mirrors upstream's TestCategorizeEndpoints case by
// case (numbered as in its table). Upstream compares unordered sets and
// treats nil and empty alike; here order and nil-ness are checked as well.
func TestCategorizeUpstream(t *testing.T) {
	cases := []struct {
		name   string
		node   Node
		policy Policy
		eps    []testEP
		want   outcome
	}{{
		name: "01 all endpoints hinted and some for the node's zone: topology applies",
		node: zoneA,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c")}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.3:80", "10.1.2.6:80"},
			All:     []string{"10.1.2.3:80", "10.1.2.6:80"},
			HasAny:  true, Mode: sameZone,
		},
	}, {
		name:   "02 eTP Local: topology ignored for Local endpoints",
		node:   zoneA,
		policy: etpLocal,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-a")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-b")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c")}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.3:80", "10.1.2.6:80"},
			Local:   []string{"10.1.2.3:80", "10.1.2.4:80"},
			All:     []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"},
			HasAny:  true, Mode: sameZone,
		},
	}, {
		name:   "03 iTP Local on a NodePort service: topology ignored for Local endpoints",
		node:   zoneA,
		policy: Policy{InternalLocal: true, ExternallyAccessible: true},
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-a")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-b")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c")}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.3:80", "10.1.2.6:80"},
			Local:   []string{"10.1.2.3:80", "10.1.2.4:80"},
			All:     []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"},
			HasAny:  true, Mode: sameZone,
		},
	}, {
		name: "04 empty node labels: no filtering",
		eps:  []testEP{{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}}},
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true},
	}, {
		name: "05 empty zone label: no filtering",
		node: Node{Zone: ""},
		eps:  []testEP{{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}}},
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true},
	}, {
		name: "06 node in a zone no endpoint is hinted for: no filtering",
		node: Node{Zone: "zone-b"},
		eps:  []testEP{{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}}},
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true},
	}, {
		name: "07 unready endpoint in the node's zone is left out",
		node: zoneA,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c")}},
			{"10.1.2.6:80", EndpointInfo{ZoneHints: zones("zone-a")}},
		},
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true, Mode: sameZone},
	}, {
		name: "08 only unready endpoints in the node's zone: no filtering",
		node: zoneA,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{ZoneHints: zones("zone-a")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c")}},
			{"10.1.2.6:80", EndpointInfo{ZoneHints: zones("zone-a")}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.4:80", "10.1.2.5:80"},
			All:     []string{"10.1.2.4:80", "10.1.2.5:80"},
			HasAny:  true,
		},
	}, {
		name: "09 an endpoint without hints: no filtering",
		node: zoneA,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"},
			All:     []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"},
			HasAny:  true,
		},
	}, {
		name: "10 several hints per endpoint: any endpoint hinted for the zone",
		node: Node{Zone: "zone-c"},
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a", "zone-b", "zone-c")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b", "zone-c")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b", "zone-d")}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c")}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"},
			All:     []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"},
			HasAny:  true, Mode: sameZone,
		},
	}, {
		// Upstream's case 11 turns the PreferSameTrafficDistribution gate off
		// and expects zone filtering. There is no gate here (it is GA and
		// locked on in 1.37), so the same input is filtered by node.
		name: "11 node hints are always honoured: there is no gate to disable them",
		node: Node{Name: "node-1", Zone: "zone-a"},
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-1")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b"), NodeHints: nodes("node-2")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c"), NodeHints: nodes("node-3")}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-4")}},
		},
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true, Mode: sameNode},
	}, {
		name: "12 PreferSameNode available",
		node: Node{Name: "node-1", Zone: "zone-a"},
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-1")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b"), NodeHints: nodes("node-2")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c"), NodeHints: nodes("node-3")}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-4")}},
		},
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true, Mode: sameNode},
	}, {
		name: "13 PreferSameNode ignored when some endpoint has no hints at all",
		node: Node{Name: "node-1", Zone: "zone-a"},
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-1")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c"), NodeHints: nodes("node-3")}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-4")}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"},
			All:     []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"},
			HasAny:  true,
		},
	}, {
		name: "14 PreferSameNode falls back to PreferSameZone without an endpoint for the node",
		node: Node{Name: "node-0", Zone: "zone-a"},
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-1")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b"), NodeHints: nodes("node-2")}},
			{"10.1.2.5:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-c"), NodeHints: nodes("node-3")}},
			{"10.1.2.6:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-4")}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.3:80", "10.1.2.6:80"},
			All:     []string{"10.1.2.3:80", "10.1.2.6:80"},
			HasAny:  true, Mode: sameZone,
		},
	}, {
		name:   "15 conflicting topology and locality: AllReachable merges, in input order",
		node:   zoneA,
		policy: etpLocal,
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-a")}},
			{"10.0.0.1:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-b")}},
			{"10.0.0.2:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
			{"10.0.0.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b")}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80", "10.0.0.2:80"},
			Local:   []string{"10.0.0.0:80", "10.0.0.1:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.1:80", "10.0.0.2:80"},
			HasAny:  true, Mode: sameZone,
		},
	}, {
		name:   "16 iTP Local without endpoints",
		policy: itpLocal,
		eps:    []testEP{},
		want:   outcome{},
	}, {
		name:   "17 iTP Local, every endpoint remote: nothing reachable, yet HasAny",
		policy: itpLocal,
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true}},
		},
		want: outcome{HasAny: true},
	}, {
		name:   "18 iTP Local, every endpoint local",
		policy: itpLocal,
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true, Local: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true, Local: true}},
		},
		want: outcome{
			Local:  []string{"10.0.0.0:80", "10.0.0.1:80"},
			All:    []string{"10.0.0.0:80", "10.0.0.1:80"},
			HasAny: true,
		},
	}, {
		name:   "19 iTP Local, some endpoints local",
		policy: itpLocal,
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true, Local: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true}},
		},
		want: outcome{Local: []string{"10.0.0.0:80"}, All: []string{"10.0.0.0:80"}, HasAny: true},
	}, {
		name: "20 Cluster policy, no endpoint ready or serving",
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{}},
			{"10.0.0.1:80", EndpointInfo{}},
		},
		want: outcome{Cluster: none, All: none},
	}, {
		name: "21 Cluster policy, some endpoints ready",
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{}},
			{"10.0.0.1:80", EndpointInfo{Ready: true}},
		},
		want: outcome{Cluster: []string{"10.0.0.1:80"}, All: []string{"10.0.0.1:80"}, HasAny: true},
	}, {
		name: "22 Cluster policy, every endpoint terminating: serving ones are the fallback",
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Serving: true, Terminating: true, Local: true}},
			{"10.0.0.1:80", EndpointInfo{Serving: true, Terminating: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.1:80"},
			HasAny:  true,
		},
	}, {
		name:   "23 iTP Local, eTP Cluster, some endpoints local",
		policy: Policy{InternalLocal: true, ExternallyAccessible: true},
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true, Local: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
			Local:   []string{"10.0.0.0:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.1:80"},
			HasAny:  true,
		},
	}, {
		name:   "24 iTP Cluster, eTP Local, some endpoints local",
		policy: etpLocal,
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true, Local: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
			Local:   []string{"10.0.0.0:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.1:80"},
			HasAny:  true,
		},
	}, {
		name:   "25 iTP Local, eTP Local, some endpoints local",
		policy: Policy{InternalLocal: true, ExternalLocal: true, ExternallyAccessible: true},
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true, Local: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
			Local:   []string{"10.0.0.0:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.1:80"},
			HasAny:  true,
		},
	}, {
		name:   "26 iTP Local, eTP Local, every endpoint remote",
		policy: Policy{InternalLocal: true, ExternalLocal: true, ExternallyAccessible: true},
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.1:80"},
			HasAny:  true,
		},
	}, {
		name:   "27 iTP Local, eTP Local, every endpoint remote and terminating",
		policy: Policy{InternalLocal: true, ExternalLocal: true, ExternallyAccessible: true},
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Serving: true, Terminating: true}},
			{"10.0.0.1:80", EndpointInfo{Serving: true, Terminating: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.1:80"},
			HasAny:  true,
		},
	}, {
		name:   "28 iTP Cluster, eTP Local, terminating endpoints: fallback only for Local",
		policy: etpLocal,
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true}},
			{"10.0.0.1:80", EndpointInfo{Local: true}},
			{"10.0.0.2:80", EndpointInfo{Serving: true, Terminating: true, Local: true}},
			{"10.0.0.3:80", EndpointInfo{Serving: true, Terminating: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80"},
			Local:   []string{"10.0.0.2:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.2:80"},
			HasAny:  true,
		},
	}, {
		name:   "29 eTP Local ignored when not externally accessible",
		policy: Policy{ExternalLocal: true},
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true, Local: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
			All:     []string{"10.0.0.0:80", "10.0.0.1:80"},
			HasAny:  true,
		},
	}, {
		name:   "30 no Cluster endpoints for an iTP Local internal-only service",
		policy: itpLocal,
		eps: []testEP{
			{"10.0.0.0:80", EndpointInfo{Ready: true}},
			{"10.0.0.1:80", EndpointInfo{Ready: true, Local: true}},
		},
		want: outcome{Local: []string{"10.0.0.1:80"}, All: []string{"10.0.0.1:80"}, HasAny: true},
	}, {
		// Upstream returns nil here; the Selection contract keeps Cluster
		// non-nil whenever the policy uses it.
		name: "31 no endpoints at all",
		eps:  nil,
		want: outcome{Cluster: none, All: none},
	}, {
		name: "32 single endpoint neither ready nor serving nor terminating",
		node: zoneA,
		eps:  []testEP{{"10.0.0.0:80", EndpointInfo{}}},
		want: outcome{Cluster: none, All: none},
	}}
	if len(cases) != 32 {
		t.Fatalf("upstream has 32 cases, the table has %d", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.eps, tc.policy, tc.node, Options{})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Categorize (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCategorizeBeyondUpstream covers behaviour upstream's table leaves
// implicit.
func TestCategorizeBeyondUpstream(t *testing.T) {
	cases := []struct {
		name   string
		node   Node
		policy Policy
		eps    []testEP
		want   outcome
	}{{
		name: "node hints without the node's name fall back to zone hints",
		node: zoneA,
		eps: []testEP{
			{"10.0.0.1:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-1")}},
			{"10.0.0.2:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b"), NodeHints: nodes("node-2")}},
		},
		want: outcome{Cluster: []string{"10.0.0.1:80"}, All: []string{"10.0.0.1:80"}, HasAny: true, Mode: sameZone},
	}, {
		name: "node hints on every endpoint but zone hints missing: node mode still applies",
		node: Node{Name: "node-2"},
		eps: []testEP{
			{"10.0.0.1:80", EndpointInfo{Ready: true, NodeHints: nodes("node-1")}},
			{"10.0.0.2:80", EndpointInfo{Ready: true, NodeHints: nodes("node-2")}},
		},
		want: outcome{Cluster: []string{"10.0.0.2:80"}, All: []string{"10.0.0.2:80"}, HasAny: true, Mode: sameNode},
	}, {
		name: "hints of unready endpoints do not count",
		node: Node{Name: "node-1", Zone: "zone-a"},
		eps: []testEP{
			{"10.0.0.1:80", EndpointInfo{Serving: true, Terminating: true, ZoneHints: zones("zone-a"), NodeHints: nodes("node-1")}},
			{"10.0.0.2:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-b"), NodeHints: nodes("node-2")}},
		},
		want: outcome{Cluster: []string{"10.0.0.2:80"}, All: []string{"10.0.0.2:80"}, HasAny: true},
	}, {
		name:   "topology applies to Cluster only; local ready endpoints merged after remote ones in input order",
		node:   Node{Name: "node-1", Zone: "zone-a"},
		policy: etpLocal,
		eps: []testEP{
			{"10.0.0.1:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
			{"10.0.0.2:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-b")}},
			{"10.0.0.3:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.1:80", "10.0.0.3:80"},
			Local:   []string{"10.0.0.2:80"},
			All:     []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"},
			HasAny:  true, Mode: sameZone,
		},
	}, {
		name:   "Local falls back to serving terminating endpoints while Cluster has ready ones",
		policy: Policy{InternalLocal: true, ExternallyAccessible: true},
		eps: []testEP{
			{"10.0.0.1:80", EndpointInfo{Serving: true, Terminating: true, Local: true}},
			{"10.0.0.2:80", EndpointInfo{Ready: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.2:80"},
			Local:   []string{"10.0.0.1:80"},
			All:     []string{"10.0.0.1:80", "10.0.0.2:80"},
			HasAny:  true,
		},
	}, {
		name:   "topology mode is not reported for local-only traffic",
		node:   zoneA,
		policy: itpLocal,
		eps: []testEP{
			{"10.0.0.1:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-b")}},
			{"10.0.0.2:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
		},
		want: outcome{Local: []string{"10.0.0.1:80"}, All: []string{"10.0.0.1:80"}, HasAny: true},
	}, {
		name: "serving but not terminating endpoints are not a fallback",
		eps:  []testEP{{"10.0.0.1:80", EndpointInfo{Serving: true}}},
		want: outcome{Cluster: none, All: none},
	}, {
		name:   "ready and terminating counts as ready",
		policy: etpLocal,
		eps: []testEP{
			{"10.0.0.1:80", EndpointInfo{Ready: true, Serving: true, Terminating: true, Local: true}},
			{"10.0.0.2:80", EndpointInfo{Serving: true, Terminating: true}},
		},
		want: outcome{
			Cluster: []string{"10.0.0.1:80"},
			Local:   []string{"10.0.0.1:80"},
			All:     []string{"10.0.0.1:80"},
			HasAny:  true,
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.eps, tc.policy, tc.node, Options{})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Categorize (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCategorizeDeriveHints(t *testing.T) {
	// threeZones is what the EndpointSlice controller leaves unhinted when
	// trafficDistribution is unset: every endpoint knows its zone and node.
	threeZones := []testEP{
		{"10.1.2.3:80", EndpointInfo{Ready: true, Zone: "zone-a", NodeName: "node-1"}},
		{"10.1.2.4:80", EndpointInfo{Ready: true, Zone: "zone-b", NodeName: "node-2"}},
		{"10.1.2.5:80", EndpointInfo{Ready: true, Zone: "zone-c", NodeName: "node-3"}},
		{"10.1.2.6:80", EndpointInfo{Ready: true, Zone: "zone-a", NodeName: "node-4"}},
	}
	all := []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"}
	zoneAEps := []string{"10.1.2.3:80", "10.1.2.6:80"}
	unfiltered := outcome{Cluster: all, All: all, HasAny: true}
	byZone := outcome{Cluster: zoneAEps, All: zoneAEps, HasAny: true, Mode: sameZone}
	node1 := Node{Name: "node-1", Zone: "zone-a"}

	cases := []struct {
		name   string
		td     string
		node   Node
		policy Policy
		// upstream turns DeriveHints off.
		upstream bool
		eps      []testEP
		want     outcome
	}{{
		name: "PreferClose derives own-zone hints",
		td:   v1.ServiceTrafficDistributionPreferClose,
		node: node1, eps: threeZones, want: byZone,
	}, {
		name: "PreferSameZone derives own-zone hints",
		td:   v1.ServiceTrafficDistributionPreferSameZone,
		node: node1, eps: threeZones, want: byZone,
	}, {
		name: "PreferSameZone derives no node hints",
		td:   v1.ServiceTrafficDistributionPreferSameZone,
		node: Node{Name: "node-3", Zone: "zone-c"}, eps: threeZones,
		want: outcome{Cluster: []string{"10.1.2.5:80"}, All: []string{"10.1.2.5:80"}, HasAny: true, Mode: sameZone},
	}, {
		name: "PreferSameNode derives own-node hints",
		td:   v1.ServiceTrafficDistributionPreferSameNode,
		node: node1, eps: threeZones,
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true, Mode: sameNode},
	}, {
		name: "PreferSameNode falls back to the derived zone hints without an endpoint on the node",
		td:   v1.ServiceTrafficDistributionPreferSameNode,
		node: Node{Name: "node-9", Zone: "zone-a"}, eps: threeZones, want: byZone,
	}, {
		name: "unset trafficDistribution derives nothing",
		node: node1, eps: threeZones, want: unfiltered,
	}, {
		name: "unknown trafficDistribution derives nothing",
		td:   "PreferSameRack",
		node: node1, eps: threeZones, want: unfiltered,
	}, {
		name:     "without DeriveHints trafficDistribution is ignored, as upstream",
		td:       v1.ServiceTrafficDistributionPreferClose,
		upstream: true, node: node1, eps: threeZones, want: unfiltered,
	}, {
		name: "a ready endpoint without a zone: no zone filtering",
		td:   v1.ServiceTrafficDistributionPreferClose,
		node: node1,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, Zone: "zone-a"}},
			{"10.1.2.4:80", EndpointInfo{Ready: true}},
		},
		want: outcome{Cluster: []string{"10.1.2.3:80", "10.1.2.4:80"}, All: []string{"10.1.2.3:80", "10.1.2.4:80"}, HasAny: true},
	}, {
		name: "an unready endpoint without a zone does not matter",
		td:   v1.ServiceTrafficDistributionPreferClose,
		node: node1,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, Zone: "zone-a"}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, Zone: "zone-b"}},
			{"10.1.2.5:80", EndpointInfo{Serving: true, Terminating: true}},
		},
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true, Mode: sameZone},
	}, {
		name: "hints present in slices win over derivation",
		td:   v1.ServiceTrafficDistributionPreferClose,
		node: node1,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, Zone: "zone-a", ZoneHints: zones("zone-b")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, Zone: "zone-b", ZoneHints: zones("zone-a")}},
		},
		want: outcome{Cluster: []string{"10.1.2.4:80"}, All: []string{"10.1.2.4:80"}, HasAny: true, Mode: sameZone},
	}, {
		name: "a single hinted endpoint disables derivation for the whole port",
		td:   v1.ServiceTrafficDistributionPreferClose,
		node: node1,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, Zone: "zone-a", NodeHints: nodes("node-1")}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, Zone: "zone-b"}},
		},
		want: outcome{Cluster: []string{"10.1.2.3:80", "10.1.2.4:80"}, All: []string{"10.1.2.3:80", "10.1.2.4:80"}, HasAny: true},
	}, {
		name: "PreferSameNode on endpoints without zones: node hints alone",
		td:   v1.ServiceTrafficDistributionPreferSameNode,
		node: Node{Name: "node-2"},
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, NodeName: "node-1"}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, NodeName: "node-2"}},
		},
		want: outcome{Cluster: []string{"10.1.2.4:80"}, All: []string{"10.1.2.4:80"}, HasAny: true, Mode: sameNode},
	}, {
		name: "PreferSameNode, endpoints without zones and none on this node: no filtering",
		td:   v1.ServiceTrafficDistributionPreferSameNode,
		node: Node{Name: "node-9", Zone: "zone-a"},
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, NodeName: "node-1"}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, NodeName: "node-2"}},
		},
		want: outcome{Cluster: []string{"10.1.2.3:80", "10.1.2.4:80"}, All: []string{"10.1.2.3:80", "10.1.2.4:80"}, HasAny: true},
	}, {
		name: "node without a zone label: derived zone hints never match",
		td:   v1.ServiceTrafficDistributionPreferClose,
		node: Node{Name: "node-1"}, eps: threeZones, want: unfiltered,
	}, {
		name: "node without a zone label still matches derived node hints",
		td:   v1.ServiceTrafficDistributionPreferSameNode,
		node: Node{Name: "node-1"}, eps: threeZones,
		want: outcome{Cluster: []string{"10.1.2.3:80"}, All: []string{"10.1.2.3:80"}, HasAny: true, Mode: sameNode},
	}, {
		name:   "derived topology applies to Cluster only",
		td:     v1.ServiceTrafficDistributionPreferClose,
		node:   node1,
		policy: etpLocal,
		eps: []testEP{
			{"10.1.2.3:80", EndpointInfo{Ready: true, Zone: "zone-b", Local: true}},
			{"10.1.2.4:80", EndpointInfo{Ready: true, Zone: "zone-a"}},
		},
		want: outcome{
			Cluster: []string{"10.1.2.4:80"},
			Local:   []string{"10.1.2.3:80"},
			All:     []string{"10.1.2.3:80", "10.1.2.4:80"},
			HasAny:  true, Mode: sameZone,
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.policy
			p.TrafficDistribution = tc.td
			got := run(t, tc.eps, p, tc.node, Options{DeriveHints: !tc.upstream})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Categorize (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSelectionSlicesDoNotAlias(t *testing.T) {
	eps := pointers([]testEP{
		{"10.0.0.0:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-a")}},
		{"10.0.0.1:80", EndpointInfo{Ready: true, Local: true, ZoneHints: zones("zone-b")}},
		{"10.0.0.2:80", EndpointInfo{Ready: true, ZoneHints: zones("zone-a")}},
	})
	sel := Categorize(eps, etpLocal, zoneA, Options{})
	extra := &testEP{Addr: "10.9.9.9:80"}
	_ = append(sel.Cluster, extra)
	_ = append(sel.Local, extra)
	want := outcome{
		Cluster: []string{"10.0.0.0:80", "10.0.0.2:80"},
		Local:   []string{"10.0.0.0:80", "10.0.0.1:80"},
		All:     []string{"10.0.0.0:80", "10.0.0.1:80", "10.0.0.2:80"},
		HasAny:  true,
	}
	got := outcome{Cluster: names(sel.Cluster), Local: names(sel.Local), All: names(sel.AllReachable), HasAny: sel.HasAny}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("appending to one slice changed another (-want +got):\n%s", diff)
	}
}
