package nftables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/internal/fanout"
	"github.com/proxykit/proxykit/internal/ruleport"
	"github.com/proxykit/proxykit/servicemodel"
)

// elemKey names one element: the set or map it is in and its key, the
// parts joined by " . " as nft prints them.
type elemKey struct {
	set, key string
}

// claim is a service port's wish for an element; value is "" in a set.
// When several ports claim one key, the first by order gets it. comment
// names the port on the elements of the no-endpoint maps, whose verdicts
// name no chain.
type claim struct {
	order, value, comment string
	// shared is set on the service-ips claim of a simple port: the
	// endpoints its shared chain finds in a shared map.
	shared *sharedDef
}

// elemClaim is one element a service port asks for.
type elemClaim struct {
	elemKey
	claim
}

// chainDef is a per-service chain and its rules. sig identifies the rules;
// it is the first rule's comment, so a full sync can tell from a listing
// (which shows comments but not rules) that a chain is already right.
type chainDef struct {
	name  string
	rules []string
	sig   string
	// dnat is set on a chain that chooses among its endpoints through an
	// endpoint map; its rules and sig wait for placeDNAT.
	dnat *dnatDef
}

// affinitySet is an endpoint's set of pinned clients.
type affinitySet struct {
	name    string
	timeout int64
}

// rendering is everything one Service (all its ports) puts in the table.
type rendering struct {
	elems  []elemClaim
	chains []chainDef
	sets   []affinitySet
}

// verdicts of the no-endpoint maps.
const (
	verdictReject = "goto " + chainRejectChain
	verdictDrop   = "drop"
)

// renderer renders the service ports of one State.
type renderer struct {
	d *Dataplane
	s *dataplane.State
	// ifLocal matches local pod traffic, "" without a detector.
	ifLocal string
	b       strings.Builder
	// num is scratch space for formatting.
	num []byte
	// verdicts are the shared chains' verdicts.
	verdicts map[sharedKey]string
	// skip reports an input left out: Dataplane.skip, or a record of it
	// when renderers run concurrently.
	skip fanout.Skip
}

func (d *Dataplane) newRenderer(s *dataplane.State, skip fanout.Skip) *renderer {
	return &renderer{d: d, s: s, ifLocal: d.localMatch(s, false), skip: skip}
}

// service renders the ports of one Service; nil when it has none to
// program.
func (r *renderer) service(ports []*servicemodel.ServicePort) *rendering {
	// Two elements are a ClusterIP port's: its IP and its destination.
	out := rendering{elems: make([]elemClaim, 0, 2*len(ports))}
	for _, sp := range ports {
		p, why := checkPort(sp, r.d.ipv6, func(reason string) { r.skip(reason, "servicePort", sp.Name.String()) })
		if why != "" {
			name := "<nil>"
			if sp != nil {
				name = sp.Name.String()
			}
			r.skip(why, "servicePort", name)
			continue
		}
		r.port(&out, p)
	}
	if len(out.elems) == 0 && len(out.chains) == 0 {
		return nil
	}
	return &out
}

func (r *renderer) usable(eps []*endpoints.Endpoint, sp *servicemodel.ServicePort) []*endpoints.Endpoint {
	if !slices.ContainsFunc(eps, func(e *endpoints.Endpoint) bool { return !ruleport.UsableEndpoint(e, r.d.ipv6) }) {
		return eps
	}
	out := eps[:0:0]
	for _, e := range eps {
		if ruleport.UsableEndpoint(e, r.d.ipv6) {
			out = append(out, e)
		} else {
			r.skip("endpoint invalid or of another family", "servicePort", sp.Name.String())
		}
	}
	return out
}

func (r *renderer) port(out *rendering, p *port) {
	sp := p.SP
	sel := r.s.Select(sp)
	pol := sp.Policy()
	cluster, local := r.usable(sel.Cluster, sp), r.usable(sel.Local, sp)
	hasEndpoints := sel.HasAny

	base := portBase(p)
	dport := " . " + p.Proto + " . " + strconv.Itoa(int(sp.Port))
	cip := sp.ClusterIP.String()
	names := chainNames{base: base}
	var shared *sharedDef
	if fitsComment(base) {
		// Its service-ips element's comment is all that names the port.
		shared = r.simplePort(p, cip, cluster, local)
	}
	var svcChain, localChain string
	if len(cluster) > 0 && shared == nil {
		svcChain = names.chain(prefixService)
		r.dnatChain(out, p, base, svcChain, cluster)
	}
	if len(local) > 0 {
		localChain = names.chain(prefixLocal)
		r.dnatChain(out, p, base, localChain, local)
	}
	// As dataplane.Lookup: the port has endpoints for internal and external
	// traffic unless its policy is Local and none is on this node.
	hasInternal := hasEndpoints && (!pol.InternalLocal || len(local) > 0)
	hasExternal := hasEndpoints && (!pol.ExternalLocal || len(local) > 0)
	internal := svcChain
	if pol.InternalLocal {
		internal = localChain
	}
	// The external chain exists whenever some external traffic can reach
	// an endpoint.
	useExternal := p.ExternallyAccessible() && hasEndpoints && (svcChain != "" || pol.ExternalLocal && localChain != "")
	unserved := newUnserved(&names, hasEndpoints)
	noEndpoint := unserved.verdict

	add := func(set, key, value string) {
		c := claim{order: p.order, value: value}
		if set == mapNoEndpointServices || set == mapNoEndpointNodePort {
			c.comment = commentOf(base)
			unserved.used = true
		}
		out.elems = append(out.elems, elemClaim{elemKey{set, key}, c})
	}
	add(setClusterIPs, cip, "")
	switch {
	case !hasInternal:
		add(mapNoEndpointServices, cip+dport, noEndpoint)
	case shared != nil:
		// Commented with the port, as its verdict names no chain of it.
		out.elems = append(out.elems, elemClaim{elemKey{mapServiceIPs, cip + dport},
			claim{order: p.order, value: r.sharedVerdict(shared), comment: commentOf(base), shared: shared}})
	case internal != "":
		add(mapServiceIPs, cip+dport, "goto "+internal)
	}

	var extChain string
	if useExternal {
		extChain = names.chain(prefixExternal)
		r.externalChain(out, extChain, svcChain, localChain, pol.ExternalLocal)
	}
	externalDest := func(ip netip.Addr) {
		key := ip.String() + dport
		if useExternal {
			add(mapServiceIPs, key, "goto "+extChain)
		}
		if !hasExternal {
			add(mapNoEndpointServices, key, noEndpoint)
		}
	}
	for _, ip := range p.ExternalIPs {
		externalDest(ip)
	}
	for _, ip := range p.LBVIPs {
		externalDest(ip)
	}
	if len(p.LBVIPs) > 0 && len(p.SourceRanges) > 0 {
		fwChain := names.chain(prefixFirewall)
		r.firewallChain(out, fwChain, p)
		for _, ip := range p.LBVIPs {
			add(mapFirewallIPs, ip.String()+dport, "goto "+fwChain)
		}
	}
	if sp.NodePort != 0 {
		key := p.Proto + " . " + strconv.Itoa(int(sp.NodePort))
		if useExternal {
			add(mapServiceNodePorts, key, "goto "+extChain)
		}
		if !hasExternal {
			add(mapNoEndpointNodePort, key, noEndpoint)
		}
	}
	for _, key := range hairpinKeys(p.Proto, cluster, local) {
		add(setHairpin, key, "")
	}
	unserved.addTo(out)
}

// unserved is the verdict of a port's no-endpoint elements: reject, or
// drop when the port has endpoints but none for that traffic. Their
// comments name the port, unless the name is too long for one: then the
// verdict is that of a chain of the port's, whose name holds it, so that
// the port is still known from the table.
type unserved struct {
	verdict string
	// chain and rule are the port's chain when it needs one, "" otherwise.
	chain, rule string
	// used is set when an element has the verdict.
	used bool
}

func newUnserved(names *chainNames, hasEndpoints bool) *unserved {
	u := &unserved{verdict: verdictReject}
	if hasEndpoints {
		u.verdict = verdictDrop
	}
	if !fitsComment(names.base) {
		u.chain, u.rule = names.chain(prefixUnserved), u.verdict
		u.verdict = "goto " + u.chain
	}
	return u
}

// addTo adds the port's chain to out if an element goes to it.
func (u *unserved) addTo(out *rendering) {
	if u.chain != "" && u.used {
		out.chains = append(out.chains, newChain(u.chain, []string{u.rule}))
	}
}

// chainNames makes the names of a port's chains. They are made only for
// the chains there are, and the hash of the port's base only once: a
// ClusterIP port has at most one chain, a simple port none.
type chainNames struct{ base, hashed string }

func (n *chainNames) chain(prefix string) string {
	if n.hashed == "" {
		n.hashed = hashedName(n.base)
	}
	return prefix + n.hashed
}

// sharedVerdict is the service-ips verdict of a simple port: "goto" its
// shared chain, a string thousands of ports share.
func (r *renderer) sharedVerdict(s *sharedDef) string {
	k := s.users()
	v, ok := r.verdicts[k]
	if !ok {
		if r.verdicts == nil {
			r.verdicts = map[sharedKey]string{}
		}
		v = "goto " + s.chain()
		r.verdicts[k] = v
	}
	return v
}

// hairpinKeys are the hairpin-connections keys of the local endpoints of
// lists: hairpin masquerading through one set of local endpoints,
// instead of a rule per endpoint.
func hairpinKeys(proto string, lists ...[]*endpoints.Endpoint) []string {
	var out []string
	for _, eps := range lists {
		for _, e := range eps {
			if e.Local {
				ip := e.Addr.Addr().String()
				out = append(out, ip+" . "+ip+" . "+proto+" . "+strconv.Itoa(int(e.Addr.Port())))
			}
		}
	}
	return out
}

// externalChain is where external destinations go: masquerade and the
// cluster endpoints, or for externalTrafficPolicy Local, pod and node
// traffic short-circuited to the cluster endpoints and the rest to the
// local ones.
func (r *renderer) externalChain(out *rendering, name, svcChain, localChain string, etpLocal bool) {
	masq := "mark set mark or " + r.d.mark
	var rules []string
	if !etpLocal {
		rules = append(rules, masq, "goto "+svcChain)
	} else {
		if svcChain != "" {
			if r.ifLocal != "" {
				rules = append(rules, r.ifLocal+" goto "+svcChain)
			}
			rules = append(rules, "fib saddr type local "+masq, "fib saddr type local goto "+svcChain)
		}
		if localChain != "" {
			rules = append(rules, "goto "+localChain)
		}
	}
	out.chains = append(out.chains, newChain(name, rules))
}

// firewallChain drops sources outside the port's ranges. A node that owns
// a VIP reaches it from the VIP, so the VIPs are allowed too when a range
// holds one of the node's IPs.
func (r *renderer) firewallChain(out *rendering, name string, p *port) {
	b := &r.b
	b.Reset()
	b.WriteString(r.d.ipX + " saddr != { ")
	for i, c := range p.SourceRanges {
		if i > 0 {
			b.WriteString(" , ")
		}
		b.WriteString(c.String())
	}
	if slices.ContainsFunc(r.s.Node.IPs, func(ip netip.Addr) bool {
		return slices.ContainsFunc(p.SourceRanges, func(c netip.Prefix) bool { return c.Contains(ip) })
	}) {
		for _, ip := range p.LBVIPs {
			b.WriteString(" , " + ip.String())
		}
	}
	b.WriteString(" } drop")
	out.chains = append(out.chains, newChain(name, []string{b.String()}))
}

// dnatChain sends connections to one of eps, chosen by numgen; with
// ClientIP affinity through a chain per endpoint that remembers the
// client.
func (r *renderer) dnatChain(out *rendering, p *port, base, name string, eps []*endpoints.Endpoint) {
	b := &r.b
	b.Reset()
	if p.AffinitySeconds == 0 {
		// One endpoint goes through the map too (numgen mod 1), as in
		// kube-proxy: replacing it is then an element change, not a
		// rule's.
		if len(eps) > maxEndpoints {
			r.skip("more endpoints than an endpoint map slot holds; the rest are not used", "servicePort", p.SP.Name.String())
			eps = eps[:maxEndpoints]
		}
		shard, _ := shardOf(name, p.Proto) // checkPort let only the protocols with maps through
		n := &dnatDef{proto: p.Proto, eps: r.endpointValues(eps), shard: shard, slot: -1}
		out.chains = append(out.chains, chainDef{name: name, dnat: n})
		return
	}
	rules := make([]string, 0, len(eps)+1)
	b.WriteString("numgen random mod " + strconv.Itoa(len(eps)) + " vmap { ")
	for i, e := range eps {
		epBase := endpointBase(base, e.Addr)
		// The set's name holds its timeout: nft cannot change the timeout
		// of a set, so a new one replaces it.
		chain := prefixEndpoint + hashedName(epBase)
		set := prefixAffinity + hashedName(epBase+"/"+strconv.FormatInt(p.AffinitySeconds, 10)+"s")
		rules = append(rules, r.d.ipX+" saddr @"+set+" goto "+chain)
		if i > 0 {
			b.WriteString(" , ")
		}
		b.WriteString(strconv.Itoa(i) + " : goto " + chain)
		if !slices.ContainsFunc(out.sets, func(a affinitySet) bool { return a.name == set }) {
			out.sets = append(out.sets, affinitySet{set, p.AffinitySeconds})
			out.chains = append(out.chains, newChain(chain, []string{
				"update @" + set + " { " + r.d.ipX + " saddr }",
				"meta l4proto " + p.Proto + " dnat to " + e.Addr.String(),
			}))
		}
	}
	b.WriteString(" }")
	out.chains = append(out.chains, newChain(name, append(rules, b.String())))
}

// simplePort is the endpoints in its shared map of a simple port, nil for
// any other. A simple port has no chain of its own: the cluster IP is all
// that reaches its endpoints (no external IP, node port or LoadBalancer
// VIP), without affinity, all of them cluster endpoints; the masquerading
// of ClusterIP traffic and hairpins is the fixed chains' (as for any
// port). Its service-ips element goes to a shared chain instead.
func (r *renderer) simplePort(p *port, cip string, cluster, local []*endpoints.Endpoint) *sharedDef {
	if p.AffinitySeconds != 0 || p.SP.InternalPolicyLocal || p.ExternallyAccessible() || len(local) > 0 || len(cluster) == 0 {
		return nil
	}
	eps := cluster
	if len(eps) > maxEndpoints {
		r.skip("more endpoints than an endpoint map slot holds; the rest are not used", "servicePort", p.SP.Name.String())
		eps = eps[:maxEndpoints]
	}
	dest := cip + " . " + strconv.Itoa(int(p.SP.Port))
	shard, _ := sharedShard(dest, p.Proto) // checkPort let only the protocols with maps through
	return &sharedDef{shard: shard, dest: dest, eps: r.endpointValues(eps)}
}

// endpointValues are the endpoint map values ("addr . port") of eps. One
// string holds them all, each a substring of it: a cold start renders
// millions.
func (r *renderer) endpointValues(eps []*endpoints.Endpoint) []string {
	out := make([]string, len(eps))
	var small [16]int
	ends := small[:0]
	if len(eps) > len(small) {
		ends = make([]int, 0, len(eps))
	}
	r.num = r.num[:0]
	for _, e := range eps {
		r.num = e.Addr.Addr().AppendTo(r.num)
		r.num = append(r.num, " . "...)
		r.num = strconv.AppendUint(r.num, uint64(e.Addr.Port()), 10)
		ends = append(ends, len(r.num))
	}
	all, start := string(r.num), 0
	for i, end := range ends {
		out[i], start = all[start:end], end
	}
	return out
}

// newChain returns the chain with its signature.
func newChain(name string, rules []string) chainDef {
	return chainDef{name: name, rules: rules, sig: "pk:" + strconv.FormatUint(fnv64(rules), 36)}
}

// placeDNAT writes the rule and signature of a chain placed at a slot of
// its endpoint map. The signature ends in "@slot", so that a full sync can
// tell from the chain's comment where the chain's elements are. It does not
// cover the endpoints: a change that keeps their number keeps the rule and
// writes elements only, which spares the kernel validating the whole table
// (as it does whenever a rule with a NAT expression is added).
func (d *Dataplane) placeDNAT(c *chainDef) {
	n := c.dnat
	c.rules = []string{"meta l4proto " + n.proto + " dnat " + d.ipX + " addr . port to numgen random mod " +
		strconv.Itoa(len(n.eps)) + " offset " + strconv.FormatInt(n.offset(), 10) + " map @" + shardName(n.shard)}
	c.sig = "pk:" + strconv.FormatUint(fnv64(c.rules), 36) + "@" + strconv.Itoa(int(n.slot))
}

// fnv64 is an FNV-1a hash of the strings, each followed by a zero byte.
func fnv64(list []string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, r := range list {
		for i := 0; i < len(r); i++ {
			h = (h ^ uint64(r[i])) * prime
		}
		h *= prime
	}
	return h
}
