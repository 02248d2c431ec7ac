package affinity

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// Selection is the outcome of Categorize for one service port. Its slices
// are read-only views that may share one backing array, the one Categorize
// was given included (AllReachable is often Cluster or Local itself); their
// capacities are clipped, so appending to one never overwrites another.
type Selection[E Endpoint] struct {
	// Cluster is the endpoints for Cluster-policy traffic: nil when the
	// policy does not use cluster endpoints, non-nil (possibly empty)
	// otherwise.
	Cluster []E
	// Local is the endpoints for Local-policy traffic; nil when the policy
	// does not use local endpoints or none qualify.
	Local []E
	// AllReachable is every endpoint some traffic may reach: the union of
	// Cluster and Local, in input order. It is nil exactly when Cluster
	// and Local are both nil.
	AllReachable []E
	// HasAny reports whether the port has any usable endpoint at all,
	// local or remote; without one, traffic is rejected.
	HasAny bool
}

// Categorize chooses, as upstream CategorizeEndpoints does, which of eps
// serve the port's Cluster and Local traffic. The elements of eps must not
// be nil; they are returned as given, never copied.
func Categorize[E Endpoint](eps []E, p Policy, node Node, opts Options) Selection[E] {
	useCluster := p.UsesClusterEndpoints()
	r, sv := rulesFor(eps, p, node, opts)

	// Classify once, remembering the verdicts, so that the exact-size
	// slices can be filled without evaluating the hint rules again.
	var small [128]uint8
	marks := small[:0]
	if len(eps) > len(small) {
		marks = make([]uint8, 0, len(eps))
	}
	marks, n := classify(&r, eps, marks)

	sel := Selection[E]{HasAny: sv.ready || sv.servingTerminating}
	if !useCluster && n.local == 0 {
		return sel
	}
	if n.cluster == len(eps) && n.cluster > 0 {
		return allCluster(sel, eps, marks, n)
	}
	return fill(sel, eps, marks, n, useCluster)
}

// rulesFor decides which endpoints p's Cluster and Local traffic may use,
// from the survey of eps it returns with them.
func rulesFor[E Endpoint](eps []E, p Policy, node Node, opts Options) (rules, survey) {
	useCluster, useLocal := p.UsesClusterEndpoints(), p.UsesLocalEndpoints()
	r := rules{node: node}
	if useCluster {
		r.hints = hintSourceFor(eps, p, opts)
	}
	sv := surveyOf(eps, r.hints, node)
	if useCluster {
		r.mode = sv.mode()
		// Some ready endpoint always survives the topology filter: a mode is
		// chosen only when one is hinted for this node or zone. So the
		// serving+terminating fallback is needed exactly when none is ready.
		r.cluster = useReady
		if !sv.ready {
			r.cluster = useServingTerminating
		}
	}
	if useLocal {
		switch {
		case sv.localReady:
			r.local = useReady
		case sv.localServingTerminating:
			r.local = useServingTerminating
		}
	}
	return r, sv
}

// counts is how many endpoints Categorize's classification put in Cluster,
// in Local, and in either.
type counts struct {
	cluster, local, union int
}

// classify appends to marks the verdict bits of each of eps and counts
// them.
func classify[E Endpoint](r *rules, eps []E, marks []uint8) ([]uint8, counts) {
	var n counts
	for _, ep := range eps {
		i := ep.Info()
		var m uint8
		if r.inCluster(i) {
			m |= inCluster
			n.cluster++
		}
		if r.inLocal(i) {
			m |= inLocal
			n.local++
		}
		if m != 0 {
			n.union++
		}
		marks = append(marks, m)
	}
	return marks, n
}

// allCluster completes sel when every endpoint serves cluster traffic, as
// usual: Cluster, and AllReachable with it, is eps itself, and only a Local
// that is not all of eps needs storage of its own.
func allCluster[E Endpoint](sel Selection[E], eps []E, marks []uint8, n counts) Selection[E] {
	sel.Cluster = eps[:n.cluster:n.cluster]
	sel.AllReachable = sel.Cluster
	switch {
	case n.local == n.cluster:
		sel.Local = sel.Cluster
	case n.local > 0:
		local := make([]E, 0, n.local)
		for k, ep := range eps {
			if marks[k]&inLocal != 0 {
				local = append(local, ep)
			}
		}
		sel.Local = local
	}
	return sel
}

// fill completes sel with Cluster, Local and AllReachable in one exact-size
// allocation.
func fill[E Endpoint](sel Selection[E], eps []E, marks []uint8, n counts, useCluster bool) Selection[E] {
	nc, nl, nu := n.cluster, n.local, n.union
	// When the union is as large as Cluster or Local it is that slice, so
	// only a genuine merge needs its own storage.
	merge := nu != nc && nu != nl
	total := nc + nl
	if merge {
		total += nu
	}
	buf := make([]E, 0, total)
	cluster := buf[0:0:nc]
	local := buf[nc:nc:(nc + nl)]
	union := buf[(nc + nl):(nc + nl):total]
	for k, ep := range eps {
		m := marks[k]
		if m&inCluster != 0 {
			cluster = append(cluster, ep)
		}
		if m&inLocal != 0 {
			local = append(local, ep)
		}
		if merge && m != 0 {
			union = append(union, ep)
		}
	}
	if useCluster {
		sel.Cluster = cluster
	}
	if nl > 0 {
		sel.Local = local
	}
	switch {
	case merge:
		sel.AllReachable = union
	case useCluster && nu == nc:
		sel.AllReachable = sel.Cluster
	default:
		sel.AllReachable = sel.Local
	}
	return sel
}

// Verdict bits of Categorize's classification pass.
const (
	inCluster uint8 = 1 << iota
	inLocal
)

// TopologyMode reports which topology filter Categorize applies to the
// port's Cluster endpoints: v1.ServiceTrafficDistributionPreferSameNode,
// v1.ServiceTrafficDistributionPreferSameZone, or "" for none. Local
// endpoints are never filtered by topology.
func TopologyMode[E Endpoint](eps []E, p Policy, node Node, opts Options) string {
	if !p.UsesClusterEndpoints() {
		return ""
	}
	return surveyOf(eps, hintSourceFor(eps, p, opts), node).mode()
}

func servingTerminating(i *EndpointInfo) bool { return i.Serving && i.Terminating }

// usable says which endpoints a traffic class is given.
type usable uint8

const (
	useNone usable = iota
	useReady
	useServingTerminating
)

// rules holds the decisions Categorize made for one port, so that counting
// and filling its slices cannot disagree.
type rules struct {
	node    Node
	hints   hintSource
	mode    string
	cluster usable
	local   usable
}

func (r *rules) inCluster(i *EndpointInfo) bool {
	switch r.cluster {
	case useReady:
		return i.Ready && r.hints.availableFor(i, r.mode, r.node)
	case useServingTerminating:
		return servingTerminating(i)
	}
	return false
}

func (r *rules) inLocal(i *EndpointInfo) bool {
	if !i.Local {
		return false
	}
	switch r.local {
	case useReady:
		return i.Ready
	case useServingTerminating:
		return servingTerminating(i)
	}
	return false
}

// hintSource answers hint questions either from the hints that the
// EndpointSlices carry or, with derived set, from the hints the
// EndpointSlice controller would write for the service's
// trafficDistribution: for each ready endpoint, a zone hint naming its own
// zone when it has one, and under PreferSameNode also a node hint naming
// its own node when it has one. The controller gives non-ready endpoints no
// hints; selection only consults ready ones anyway.
type hintSource struct {
	derived   bool
	nodeHints bool
}

func hintSourceFor[E Endpoint](eps []E, p Policy, opts Options) hintSource {
	if !opts.DeriveHints {
		return hintSource{}
	}
	for _, ep := range eps {
		if i := ep.Info(); len(i.ZoneHints) > 0 || len(i.NodeHints) > 0 {
			// The controller has spoken; its hints (which may come from the
			// topology-mode annotation's proportional allocation) win.
			return hintSource{}
		}
	}
	switch p.TrafficDistribution {
	case v1.ServiceTrafficDistributionPreferClose, v1.ServiceTrafficDistributionPreferSameZone:
		return hintSource{derived: true}
	case v1.ServiceTrafficDistributionPreferSameNode:
		return hintSource{derived: true, nodeHints: true}
	}
	return hintSource{}
}

func (h hintSource) hasZoneHints(i *EndpointInfo) bool {
	if h.derived {
		return i.Ready && i.Zone != ""
	}
	return len(i.ZoneHints) > 0
}

func (h hintSource) zoneHinted(i *EndpointInfo, zone string) bool {
	if h.derived {
		return i.Ready && i.Zone != "" && i.Zone == zone
	}
	return slices.Contains(i.ZoneHints, zone)
}

func (h hintSource) hasNodeHints(i *EndpointInfo) bool {
	if h.derived {
		return h.nodeHints && i.Ready && i.NodeName != ""
	}
	return len(i.NodeHints) > 0
}

func (h hintSource) nodeHinted(i *EndpointInfo, node string) bool {
	if h.derived {
		return h.nodeHints && i.Ready && i.NodeName != "" && i.NodeName == node
	}
	return slices.Contains(i.NodeHints, node)
}

// availableFor reports whether i may take this node's Cluster traffic under
// mode. The fallback from node to zone to none happened when the mode was
// chosen, so there is none here.
func (h hintSource) availableFor(i *EndpointInfo, mode string, node Node) bool {
	switch mode {
	case v1.ServiceTrafficDistributionPreferSameNode:
		return h.nodeHinted(i, node.Name)
	case v1.ServiceTrafficDistributionPreferSameZone:
		return h.zoneHinted(i, node.Zone)
	}
	return true
}

// survey is what one pass over a port's endpoints learns: which kinds of
// usable endpoint exist, and how the ready ones are hinted.
type survey struct {
	ready, servingTerminating           bool
	localReady, localServingTerminating bool
	// allNode and allZone: every ready endpoint has a node (zone) hint;
	// forNode and forZone: some ready endpoint is hinted for this node
	// (its zone).
	allNode, forNode bool
	allZone, forZone bool
}

func surveyOf[E Endpoint](eps []E, h hintSource, node Node) survey {
	s := survey{allNode: true, allZone: true}
	for _, ep := range eps {
		i := ep.Info()
		if !i.Ready {
			if servingTerminating(i) {
				s.servingTerminating = true
				s.localServingTerminating = s.localServingTerminating || i.Local
			}
			continue
		}
		s.ready = true
		s.localReady = s.localReady || i.Local
		if !h.hasNodeHints(i) {
			s.allNode = false
		} else if !s.forNode && h.nodeHinted(i, node.Name) {
			s.forNode = true
		}
		if !h.hasZoneHints(i) {
			s.allZone = false
		} else if !s.forZone && h.zoneHinted(i, node.Zone) {
			s.forZone = true
		}
	}
	return s
}

// mode picks the narrowest hint set that every ready endpoint takes part in
// and that names this node (or its zone) at least once.
func (s survey) mode() string {
	switch {
	case !s.ready:
		return ""
	case s.allNode && s.forNode:
		return v1.ServiceTrafficDistributionPreferSameNode
	case s.allZone && s.forZone:
		return v1.ServiceTrafficDistributionPreferSameZone
	}
	return ""
}
