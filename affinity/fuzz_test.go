package affinity

import (
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

var (
	fuzzZones = []string{"", "zone-a", "zone-b", "zone-c"}
	fuzzNodes = []string{"", "node-1", "node-2", "node-3"}
	fuzzTD    = []string{
		"",
		v1.ServiceTrafficDistributionPreferClose,
		v1.ServiceTrafficDistributionPreferSameZone,
		v1.ServiceTrafficDistributionPreferSameNode,
		"PreferSameRack",
	}
)

// maxFuzzEndpoints bounds the work one input can ask for.
const maxFuzzEndpoints = 64

// decodeFuzz turns fuzz bytes into endpoints, two bytes each. The first
// holds the conditions (bits 0-3) and a zone-hint set (bits 4-7, over
// fuzzZones, so the empty zone can be hinted too); the second the zone (bits
// 0-1), the node (bits 2-3) and a node-hint set (bits 4-7, over fuzzNodes).
func decodeFuzz(data []byte, policy, node, td uint8) ([]*testEP, Policy, Node, Options) {
	var eps []*testEP
	for i := 0; i+1 < len(data) && len(eps) < maxFuzzEndpoints; i += 2 {
		a, b := data[i], data[i+1]
		ep := &testEP{Addr: strconv.Itoa(len(eps)), EndpointInfo: EndpointInfo{
			Ready:       a&1 != 0,
			Serving:     a&2 != 0,
			Terminating: a&4 != 0,
			Local:       a&8 != 0,
			Zone:        fuzzZones[b&3],
			NodeName:    fuzzNodes[(b>>2)&3],
			ZoneHints:   hintSet(a>>4, fuzzZones),
			NodeHints:   hintSet(b>>4, fuzzNodes),
		}}
		eps = append(eps, ep)
	}
	p := Policy{
		InternalLocal:        policy&1 != 0,
		ExternalLocal:        policy&2 != 0,
		ExternallyAccessible: policy&4 != 0,
		TrafficDistribution:  fuzzTD[int(td)%len(fuzzTD)],
	}
	n := Node{Name: fuzzNodes[node&3], Zone: fuzzZones[(node>>2)&3]}
	return eps, p, n, Options{DeriveHints: policy&8 != 0}
}

func hintSet(bits uint8, from []string) []string {
	var out []string
	for i, v := range from {
		if bits&(1<<i) != 0 {
			out = append(out, v)
		}
	}
	return out
}

// reference is Categorize restated the long way: hints are materialized
// onto copies as the EndpointSlice controller would write them, then
// upstream's steps run one after the other, and the union is built as a
// set and put back into input order.
func reference(eps []*testEP, p Policy, node Node, opts Options) outcome {
	work := make([]EndpointInfo, len(eps))
	hinted := false
	for i, ep := range eps {
		work[i] = ep.EndpointInfo
		hinted = hinted || len(ep.ZoneHints) > 0 || len(ep.NodeHints) > 0
	}
	closeTD := p.TrafficDistribution == v1.ServiceTrafficDistributionPreferClose ||
		p.TrafficDistribution == v1.ServiceTrafficDistributionPreferSameZone ||
		p.TrafficDistribution == v1.ServiceTrafficDistributionPreferSameNode
	if opts.DeriveHints && !hinted && closeTD {
		for i := range work {
			w := &work[i]
			if !w.Ready {
				continue
			}
			if w.Zone != "" {
				w.ZoneHints = []string{w.Zone}
			}
			if w.NodeName != "" && p.TrafficDistribution == v1.ServiceTrafficDistributionPreferSameNode {
				w.NodeHints = []string{w.NodeName}
			}
		}
	}

	var out outcome
	var cluster, local []int
	if p.UsesClusterEndpoints() {
		ready := 0
		allNode, forNode, allZone, forZone := true, false, true, false
		for _, w := range work {
			if !w.Ready {
				continue
			}
			ready++
			allNode = allNode && len(w.NodeHints) > 0
			forNode = forNode || slices.Contains(w.NodeHints, node.Name)
			allZone = allZone && len(w.ZoneHints) > 0
			forZone = forZone || slices.Contains(w.ZoneHints, node.Zone)
		}
		switch {
		case ready > 0 && allNode && forNode:
			out.Mode = v1.ServiceTrafficDistributionPreferSameNode
		case ready > 0 && allZone && forZone:
			out.Mode = v1.ServiceTrafficDistributionPreferSameZone
		}
		cluster = []int{}
		for i, w := range work {
			switch {
			case !w.Ready:
			case out.Mode == v1.ServiceTrafficDistributionPreferSameNode && !slices.Contains(w.NodeHints, node.Name):
			case out.Mode == v1.ServiceTrafficDistributionPreferSameZone && !slices.Contains(w.ZoneHints, node.Zone):
			default:
				cluster = append(cluster, i)
			}
		}
		if len(cluster) == 0 {
			for i, w := range work {
				if w.Serving && w.Terminating {
					cluster = append(cluster, i)
				}
			}
		}
	}
	if p.UsesLocalEndpoints() {
		for i, w := range work {
			if w.Local && w.Ready {
				local = append(local, i)
			}
		}
		if len(local) == 0 {
			for i, w := range work {
				if w.Local && w.Serving && w.Terminating {
					local = append(local, i)
				}
			}
		}
	}
	for _, w := range work {
		out.HasAny = out.HasAny || w.Ready || (w.Serving && w.Terminating)
	}

	toNames := func(idx []int) []string {
		if idx == nil {
			return nil
		}
		s := make([]string, 0, len(idx))
		for _, i := range idx {
			s = append(s, eps[i].Addr)
		}
		return s
	}
	out.Cluster = toNames(cluster)
	out.Local = toNames(local)
	if cluster != nil || local != nil {
		union := map[int]bool{}
		for _, i := range cluster {
			union[i] = true
		}
		for _, i := range local {
			union[i] = true
		}
		all := []int{}
		for i := range eps {
			if union[i] {
				all = append(all, i)
			}
		}
		out.All = toNames(all)
	}
	return out
}

// checkSubsequence fails t unless got is made of elements of in, in input
// order, each at most once.
func checkSubsequence(t *testing.T, what string, in, got []*testEP) {
	t.Helper()
	j := 0
	for _, g := range got {
		for j < len(in) && in[j] != g {
			j++
		}
		if j == len(in) {
			t.Fatalf("%s is not a subsequence of the input", what)
		}
		j++
	}
}

func FuzzCategorize(f *testing.F) {
	f.Add([]byte{}, uint8(0), uint8(0), uint8(0))
	f.Add([]byte{0x11, 0x05, 0x21, 0x0a, 0x19, 0x15}, uint8(6), uint8(5), uint8(1))
	f.Add([]byte{0x0e, 0x00, 0x06, 0x00, 0x01, 0x00}, uint8(7), uint8(0), uint8(0))
	f.Add([]byte{0x01, 0x15, 0x01, 0x2a, 0x09, 0x4b}, uint8(8), uint8(5), uint8(3))
	f.Add([]byte{0x01, 0x05, 0x01, 0x0a, 0x01, 0x00}, uint8(12), uint8(9), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, policy, node, td uint8) {
		eps, p, n, opts := decodeFuzz(data, policy, node, td)
		sel := Categorize(eps, p, n, opts)

		checkSubsequence(t, "Cluster", eps, sel.Cluster)
		checkSubsequence(t, "Local", eps, sel.Local)
		checkSubsequence(t, "AllReachable", eps, sel.AllReachable)
		var union []*testEP
		for _, ep := range eps {
			if slices.Contains(sel.Cluster, ep) || slices.Contains(sel.Local, ep) {
				union = append(union, ep)
			}
		}
		if !slices.Equal(union, sel.AllReachable) {
			t.Fatalf("AllReachable %v is not the union of Cluster and Local %v", names(sel.AllReachable), names(union))
		}
		if (sel.Cluster == nil) == p.UsesClusterEndpoints() {
			t.Fatalf("Cluster nil = %v, but UsesClusterEndpoints = %v", sel.Cluster == nil, p.UsesClusterEndpoints())
		}
		if sel.Local != nil && len(sel.Local) == 0 {
			t.Fatal("Local is empty but not nil")
		}
		if (sel.AllReachable == nil) != (sel.Cluster == nil && sel.Local == nil) {
			t.Fatal("AllReachable is nil though Cluster or Local is not, or the other way round")
		}
		usable := slices.ContainsFunc(eps, func(ep *testEP) bool { return ep.Ready || (ep.Serving && ep.Terminating) })
		if sel.HasAny != usable {
			t.Fatalf("HasAny = %v, but some endpoint usable = %v", sel.HasAny, usable)
		}
		if p.UsesClusterEndpoints() && usable && len(sel.Cluster) == 0 {
			t.Fatal("usable endpoints exist but Cluster is empty")
		}

		got := outcome{
			Cluster: names(sel.Cluster),
			Local:   names(sel.Local),
			All:     names(sel.AllReachable),
			HasAny:  sel.HasAny,
			Mode:    TopologyMode(eps, p, n, opts),
		}
		if diff := cmp.Diff(reference(eps, p, n, opts), got); diff != "" {
			t.Fatalf("Categorize differs from the reference (-want +got):\n%s", diff)
		}
	})
}
