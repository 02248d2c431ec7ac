package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
)

// tracer follows a packet through the rules of a table, interpreting the
// rule forms the dataplane writes (it fails on any other), and reports the
// Verdict: what a kernel would do with the first packet of the connection.
// The tests run it over a knftables.Fake's table, Ruleset over the
// kernel's.
type tracer struct {
	t       *knftables.FakeTable
	ipX     string
	nodeIPs []netip.Addr
	p       dataplane.Packet

	// Packet state along the path.
	dst      netip.AddrPort
	marked   bool
	dnat     []netip.AddrPort
	affinity bool
	// service is the port of the last per-service chain entered or
	// no-endpoint element matched.
	service servicemodel.PortName
	// endpoint is the endpoint a masquerading-chain pass looks at.
	endpoint netip.AddrPort

	// steps are the chains entered and map elements matched, for people.
	steps []string
}

type outcome int

const (
	cont outcome = iota // fell off the chain
	ret                 // a goto'd chain ended: back to the base chain's caller
	accept
	dropped
	rejected
	natted
	masqueraded
)

func traceFake(fake *knftables.Fake, ipv6 bool, nodeIPs []netip.Addr, p dataplane.Packet) (dataplane.Verdict, error) {
	fake.RLock()
	defer fake.RUnlock()
	if fake.Table == nil {
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}
	return traceTable(fake.Table, ipv6, nodeIPs, p)
}

func traceTable(t *knftables.FakeTable, ipv6 bool, nodeIPs []netip.Addr, p dataplane.Packet) (dataplane.Verdict, error) {
	tr := &tracer{t: t, ipX: "ip", nodeIPs: nodeIPs, p: p, dst: p.Dst}
	if ipv6 {
		tr.ipX = "ip6"
	}
	return tr.run()
}

func (tr *tracer) local(a netip.Addr) bool {
	return a.IsLoopback() || slices.Contains(tr.nodeIPs, a)
}

func (tr *tracer) run() (dataplane.Verdict, error) {
	fromNode := tr.p.From == dataplane.FromNode
	pre, nat := "filter-prerouting-pre-dnat", "nat-prerouting"
	if fromNode {
		pre, nat = "filter-output-pre-dnat", "nat-output"
	}
	if v, done, err := tr.filter(pre); done || err != nil {
		return v, err
	}
	if _, err := tr.base(nat); err != nil {
		return dataplane.Verdict{}, err
	}
	if tr.dnat == nil {
		// Not rewritten: the filter chains see the packet as sent.
		var chains []string
		switch {
		case fromNode && tr.local(tr.dst.Addr()):
			chains = []string{"filter-output", "filter-input"}
		case fromNode:
			chains = []string{"filter-output"}
		case tr.local(tr.dst.Addr()):
			chains = []string{"filter-input"}
		default:
			chains = []string{"filter-forward"}
		}
		for _, c := range chains {
			if v, done, err := tr.filter(c); done || err != nil {
				return v, err
			}
		}
		return dataplane.Verdict{Action: dataplane.NotAService}, nil
	}
	v := dataplane.Verdict{Action: dataplane.DNAT, Service: tr.service, Endpoints: tr.dnat, Affinity: tr.affinity, Masquerade: tr.marked}
	slices.SortFunc(v.Endpoints, netip.AddrPort.Compare)
	v.Endpoints = slices.Compact(v.Endpoints)
	all := true
	for _, ep := range v.Endpoints {
		tr.endpoint = ep
		o, err := tr.chain(chainMasquerading)
		if err != nil {
			return v, err
		}
		if o == masqueraded && !tr.marked {
			v.Hairpin = append(v.Hairpin, ep)
		} else if o != masqueraded {
			all = false
		}
	}
	v.Masquerade = tr.marked || all
	return v, nil
}

// filter runs a filter base chain; done when it dropped or rejected.
func (tr *tracer) filter(chain string) (dataplane.Verdict, bool, error) {
	o, err := tr.base(chain)
	switch {
	case err != nil:
		return dataplane.Verdict{}, true, err
	case o == dropped:
		return dataplane.Verdict{Action: dataplane.Drop, Service: tr.service}, true, nil
	case o == rejected:
		return dataplane.Verdict{Action: dataplane.Reject, Service: tr.service}, true, nil
	}
	return dataplane.Verdict{}, false, nil
}

func (tr *tracer) base(chain string) (outcome, error) {
	if _, ok := tr.t.Chains[chain]; !ok {
		return cont, nil
	}
	o, err := tr.chain(chain)
	if o == ret {
		o = cont
	}
	return o, err
}

// chain runs the rules of a chain until one ends the packet's walk.
func (tr *tracer) chain(name string) (outcome, error) {
	c, ok := tr.t.Chains[name]
	if !ok {
		return 0, fmt.Errorf("no chain %q", name)
	}
	if isServiceChain(name) {
		tr.service = portOfChain(name)
	}
	tr.steps = append(tr.steps, "chain "+name)
	for _, r := range c.Rules {
		o, err := tr.rule(r.Rule)
		if err != nil {
			return 0, fmt.Errorf("chain %s, rule %q: %w", name, r.Rule, err)
		}
		if o != cont {
			return o, nil
		}
	}
	return cont, nil
}

// portOfChain reads the service port out of a per-service chain's name:
// "<prefix><hash>-ns/name/proto/port[__endpoint]".
func portOfChain(name string) servicemodel.PortName {
	_, rest, _ := strings.Cut(name, "-")
	_, rest, _ = strings.Cut(rest, "-")
	rest, _, _ = strings.Cut(rest, "__")
	return portOfBase(rest)
}

func portOfBase(base string) servicemodel.PortName {
	parts := strings.SplitN(base, "/", 4)
	if len(parts) != 4 || len(base) == maxComment && strings.HasSuffix(base, truncated) {
		return servicemodel.PortName{}
	}
	return servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: parts[0], Name: parts[1]},
		Port: parts[3], Protocol: v1.Protocol(strings.ToUpper(parts[2]))}
}

func (tr *tracer) proto() string { return strings.ToLower(string(tr.p.Protocol)) }

// rule evaluates one rule: its matches left to right, then its statements.
func (tr *tracer) rule(rule string) (outcome, error) {
	toks := strings.Fields(rule)
	for i := 0; i < len(toks); {
		if o, ok, err := tr.vmapMatch(toks[i:]); ok {
			return o, err
		}
		n, hit := tr.match(toks[i:])
		if n == 0 {
			return tr.statement(toks[i:])
		}
		if !hit {
			return cont, nil
		}
		i += n
	}
	return cont, nil
}

// word is toks[n], or "" past its end, so that a short rule reads as one
// that does not match rather than out of range.
func word(toks []string, n int) string {
	if n < len(toks) {
		return toks[n]
	}
	return ""
}

// vmapMatch evaluates the verdict map lookup that toks starts with, if it
// does; ok reports that it does.
func (tr *tracer) vmapMatch(toks []string) (o outcome, ok bool, err error) {
	switch {
	case word(toks, 0) == tr.ipX && word(toks, 2) == "." && word(toks, 5) == "." && word(toks, 6) == "th":
		// ip daddr . meta l4proto . th dport vmap @M
		key := tr.dst.Addr().String() + " . " + tr.proto() + " . " + strconv.Itoa(int(tr.dst.Port()))
		o, err = tr.vmap(strings.TrimPrefix(toks[9], "@"), key)
		return o, true, err
	case word(toks, 0) == "meta" && word(toks, 1) == "l4proto" && word(toks, 2) == ".":
		// meta l4proto . th dport vmap @M
		key := tr.proto() + " . " + strconv.Itoa(int(tr.dst.Port()))
		o, err = tr.vmap(strings.TrimPrefix(toks[6], "@"), key)
		return o, true, err
	}
	return cont, false, nil
}

// match evaluates the match that toks starts with: n is how many words it
// takes, 0 when toks starts with a statement instead, and hit whether the
// packet matches.
func (tr *tracer) match(toks []string) (n int, hit bool) {
	peek := func(k int) string { return word(toks, k) }
	switch {
	case peek(0) == "ct" && peek(1) == "state" && peek(2) == "new":
		return 3, true
	case peek(0) == "ct" && peek(1) == "status" && peek(2) == "dnat":
		return 3, tr.dnat != nil
	case peek(0) == "mark" && peek(1) == "and":
		// mark and M != 0
		return 5, tr.marked
	case peek(0) == "fib" && peek(2) == "type" && peek(3) == "local":
		a := tr.p.Src
		if peek(1) == "daddr" {
			a = tr.dst.Addr()
		}
		return 4, tr.local(a) || peek(1) == "saddr" && tr.p.From == dataplane.FromNode
	case peek(0) == "meta" && peek(1) == "l4proto" && peek(2) != ".":
		return 3, peek(2) == tr.proto()
	case peek(0) == "iifname":
		return tr.iifname(toks)
	case peek(0) == tr.ipX && peek(2) == "." && peek(3) == tr.ipX:
		// ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections
		ep := tr.endpoint
		key := tr.p.Src.String() + " . " + ep.Addr().String() + " . " + tr.proto() + " . " + strconv.Itoa(int(ep.Port()))
		return 12, tr.inSet(strings.TrimPrefix(toks[11], "@"), key)
	case peek(0) == tr.ipX && (peek(1) == "saddr" || peek(1) == "daddr"):
		return tr.addrMatch(toks)
	}
	return 0, false
}

// iifname evaluates an input interface match, which a packet from the
// node never meets and one with no interface meets when it is from a
// local pod.
func (tr *tracer) iifname(toks []string) (n int, hit bool) {
	neg := word(toks, 1) == "!="
	if neg {
		n++
	}
	pat := strings.Trim(word(toks, n+1), `"`)
	n += 2
	var m bool
	switch {
	case tr.p.From == dataplane.FromNode:
	case tr.p.Interface == "":
		m = tr.p.From == dataplane.FromLocalPod
	case strings.HasSuffix(pat, "*"):
		m = strings.HasPrefix(tr.p.Interface, strings.TrimSuffix(pat, "*"))
	default:
		m = tr.p.Interface == pat
	}
	return n, m != neg
}

// addrMatch evaluates a source or destination address match against one
// address or prefix, an anonymous set or a named one.
func (tr *tracer) addrMatch(toks []string) (n int, hit bool) {
	a := tr.p.Src
	if word(toks, 1) == "daddr" {
		a = tr.dst.Addr()
	}
	i := 2
	neg := word(toks, i) == "!="
	if neg {
		i++
	}
	var m bool
	if word(toks, i) == "{" {
		end := slices.Index(toks[i:], "}") + i
		for _, v := range toks[i+1 : end] {
			if inPrefixOrAddr(strings.TrimSuffix(v, ","), a) {
				m = true
			}
		}
		i = end + 1
	} else if strings.HasPrefix(word(toks, i), "@") {
		m = tr.inSet(strings.TrimPrefix(word(toks, i), "@"), a.String())
		i++
	} else {
		m = inPrefixOrAddr(word(toks, i), a)
		i++
	}
	return i, m != neg
}

func inPrefixOrAddr(s string, a netip.Addr) bool {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Contains(a)
	}
	b, err := netip.ParseAddr(s)
	return err == nil && a == b
}

func (tr *tracer) inSet(name, key string) bool {
	s, ok := tr.t.Sets[name]
	if !ok {
		return false
	}
	for _, e := range s.Elements {
		if strings.Join(e.Key, " . ") == key {
			return true
		}
	}
	return false
}

func (tr *tracer) vmap(name, key string) (outcome, error) {
	m, ok := tr.t.Maps[name]
	if !ok {
		return 0, fmt.Errorf("no map %q", name)
	}
	for _, e := range m.Elements {
		if strings.Join(e.Key, " . ") != key {
			continue
		}
		if e.Comment != nil {
			tr.service = portOfBase(*e.Comment)
		}
		tr.steps = append(tr.steps, "map "+name+": "+key+" : "+strings.Join(e.Value, " "))
		return tr.verdict(strings.Fields(strings.Join(e.Value, " ")))
	}
	return cont, nil
}

func (tr *tracer) verdict(toks []string) (outcome, error) {
	switch {
	case len(toks) == 1 && toks[0] == "drop":
		return dropped, nil
	case len(toks) == 1 && toks[0] == "reject":
		return rejected, nil
	case len(toks) == 1 && toks[0] == "accept":
		return accept, nil
	case len(toks) == 2 && toks[0] == "jump":
		o, err := tr.chain(toks[1])
		if o == ret {
			o = cont
		}
		return o, err
	case len(toks) == 2 && toks[0] == "goto":
		o, err := tr.chain(toks[1])
		if o == cont {
			o = ret
		}
		return o, err
	}
	return 0, fmt.Errorf("unknown verdict %q", strings.Join(toks, " "))
}

func (tr *tracer) statement(toks []string) (outcome, error) {
	s := strings.Join(toks, " ")
	switch {
	case s == "masquerade fully-random":
		return masqueraded, nil
	case len(toks) <= 2:
		return tr.verdict(toks)
	case strings.HasPrefix(s, "mark set mark or "):
		tr.marked = true
		return tr.rest(toks[5:])
	case strings.HasPrefix(s, "mark set mark xor "):
		return tr.rest(toks[5:])
	case strings.HasPrefix(s, "update @"):
		tr.affinity = true
		return cont, nil
	case strings.HasPrefix(s, "dnat to "):
		ep, err := netip.ParseAddrPort(toks[2])
		if err != nil {
			return 0, err
		}
		tr.dnat = append(tr.dnat, ep)
		return natted, nil
	case strings.HasPrefix(s, "dnat "+tr.ipX+" addr . port to numgen random mod "):
		return tr.endpointMap(toks[9:])
	case strings.HasPrefix(s, "dnat "+tr.ipX+" addr . port to "+tr.ipX+" daddr . "):
		return tr.sharedMap(toks[9:])
	case strings.HasPrefix(s, "numgen random mod "):
		// Every branch is possible: follow each.
		body := s[strings.Index(s, "{")+1 : strings.LastIndex(s, "}")]
		for _, e := range strings.Split(body, ",") {
			f := strings.Fields(e)
			if len(f) != 4 {
				return 0, fmt.Errorf("bad numgen vmap element %q", e)
			}
			if _, err := tr.verdict(f[2:]); err != nil {
				return 0, err
			}
		}
		return natted, nil
	}
	return 0, fmt.Errorf("unknown statement %q", s)
}

// endpointMap follows every value of "N [offset K] map @M" to its
// endpoint in map M.
func (tr *tracer) endpointMap(toks []string) (outcome, error) {
	n, err := strconv.Atoi(toks[0])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad numgen modulus %q", toks[0])
	}
	var offset int64
	if len(toks) == 5 && toks[1] == "offset" {
		if offset, err = strconv.ParseInt(toks[2], 10, 64); err != nil {
			return 0, err
		}
		toks = toks[2:]
	}
	if len(toks) != 3 || toks[1] != "map" {
		return 0, fmt.Errorf("bad numgen map %q", strings.Join(toks, " "))
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.FormatInt(offset+int64(i), 10)
	}
	return tr.mapEndpoints(strings.TrimPrefix(toks[2], "@"), keys)
}

// mapEndpoints follows each of keys to its endpoint in map name: a DNAT
// to every one.
func (tr *tracer) mapEndpoints(name string, keys []string) (outcome, error) {
	m, ok := tr.t.Maps[name]
	if !ok {
		return 0, fmt.Errorf("no map %q", name)
	}
	values := make(map[string]string, len(m.Elements))
	for _, e := range m.Elements {
		values[strings.Join(e.Key, " . ")] = strings.Join(e.Value, " . ")
	}
	for _, key := range keys {
		v, ok := values[key]
		if !ok {
			return 0, fmt.Errorf("map %s has no element %s", name, key)
		}
		f := strings.Fields(v)
		if len(f) != 3 || f[1] != "." {
			return 0, fmt.Errorf("bad endpoint %q in map %s", v, name)
		}
		addr, err := netip.ParseAddr(f[0])
		if err != nil {
			return 0, fmt.Errorf("bad endpoint %q in map %s: %w", v, name, err)
		}
		port, err := strconv.ParseUint(f[2], 10, 16)
		if err != nil {
			return 0, fmt.Errorf("bad endpoint %q in map %s: %w", v, name, err)
		}
		tr.dnat = append(tr.dnat, netip.AddrPortFrom(addr, uint16(port)))
		tr.steps = append(tr.steps, "map "+name+": "+key+" : "+v)
	}
	return natted, nil
}

// sharedMap follows "P dport . numgen random mod N map @M": every value
// of numgen, as the key "destination . port . value", to its endpoint in
// map M. The protocol match it implies fails for a packet of another
// protocol.
func (tr *tracer) sharedMap(toks []string) (outcome, error) {
	if len(toks) != 9 || toks[1] != "dport" || toks[2] != "." || strings.Join(toks[3:6], " ") != "numgen random mod" || toks[7] != "map" {
		return 0, fmt.Errorf("bad shared endpoint map %q", strings.Join(toks, " "))
	}
	if toks[0] != tr.proto() {
		return cont, nil
	}
	n, err := strconv.Atoi(toks[6])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad numgen modulus %q", toks[6])
	}
	dest := tr.dst.Addr().String() + " . " + strconv.Itoa(int(tr.dst.Port())) + " . "
	keys := make([]string, n)
	for i := range keys {
		keys[i] = dest + strconv.Itoa(i)
	}
	return tr.mapEndpoints(strings.TrimPrefix(toks[8], "@"), keys)
}

// rest runs the statements after a mark.
func (tr *tracer) rest(toks []string) (outcome, error) {
	if len(toks) == 0 {
		return cont, nil
	}
	return tr.statement(toks)
}
