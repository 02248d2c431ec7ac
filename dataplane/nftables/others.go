package nftables

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// Others is what "nft list ruleset" printed of the tables that are not the
// dataplane's: the base chains the kernel runs beside the dataplane's at
// the same hooks, and the chains, sets and maps they reach. Another
// program's table (kube-proxy's, left behind by a migration, or a
// firewall's) can drop or rewrite service traffic before the dataplane's
// nat chain sees it; Others.Trace says whether it does. ParseOthers makes
// one.
type Others struct {
	family v1.IPFamily
	tables []*otherTable
	// hooks holds the base chains at each hook that run no later than
	// the dataplane's nat chain, in the order the kernel runs them.
	hooks map[string][]otherBase
}

type otherTable struct {
	// name is "family name", as nft names a table.
	name   string
	chains map[string]*otherChain
	// sets are the sets and maps, by name.
	sets map[string]*otherSet
}

// otherSet is a set's or map's elements, indexed: a verify traces every
// frontend of the cluster through them.
type otherSet struct {
	// exact holds the elements whose key is plain values, by the key as
	// nft lists it; ranged those with a prefix, range or wildcard.
	exact  map[string]*knftables.Element
	ranged []*knftables.Element
}

func newOtherSet(elems []*knftables.Element) *otherSet {
	s := &otherSet{exact: make(map[string]*knftables.Element, len(elems))}
	for _, el := range elems {
		if slices.ContainsFunc(el.Key, func(k string) bool { return strings.ContainsAny(k, "/-*") }) {
			s.ranged = append(s.ranged, el)
		} else if _, dup := s.exact[strings.Join(el.Key, " . ")]; !dup {
			s.exact[strings.Join(el.Key, " . ")] = el
		}
	}
	return s
}

// otherRule is a rule's text and its words (tokenize).
type otherRule struct {
	text string
	toks []string
}

type otherChain struct {
	name  string
	rules []otherRule
	// base chains only: the hook, priority and policy.
	hook, policy string
	priority     int
	base         bool
}

// namedPriorities are nft's priority names, in the ip, ip6 and inet
// families.
var namedPriorities = map[string]int{"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100}

// ParseOthers reads what "nft list ruleset" printed, keeping the tables
// that packets of family cross (ip or ip6, and inet) but own, the
// dataplane's ("ip proxykit"). A table it cannot read fails it; a rule it
// cannot follow fails only the traces that meet it.
func ParseOthers(ruleset []byte, family v1.IPFamily, own string) (*Others, error) {
	o := &Others{family: family}
	want := map[string]bool{"inet": true, "ip": family == v1.IPv4Protocol, "ip6": family == v1.IPv6Protocol}
	var t *otherTable
	var c *otherChain
	// set is the set or map whose body the lines are in; pending the
	// lines of an elements list spread over lines (joined once: a map
	// of a big cluster spans thousands).
	var set string
	var pending []string
	depth := 0
	for n, raw := range strings.Split(string(ruleset), "\n") {
		line := strings.TrimSpace(raw)
		if pending != nil {
			pending = append(pending, line)
			if strings.HasSuffix(line, "}") {
				t.sets[set], pending = newOtherSet(parseElements(strings.Join(pending, " "))), nil
			}
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "table" && depth == 0:
			if len(f) != 4 {
				return nil, fmt.Errorf("line %d: bad table line %q", n+1, line)
			}
			depth, t = 1, nil
			if name := f[1] + " " + f[2]; want[f[1]] && name != own {
				t = &otherTable{name: name, chains: map[string]*otherChain{}, sets: map[string]*otherSet{}}
				o.tables = append(o.tables, t)
			}
		case f[0] == "}":
			depth--
			c, set = nil, ""
		case f[len(f)-1] == "{":
			depth++
			if depth != 2 || t == nil || len(f) != 3 {
				// A flowtable's or an object's body, or a table not read.
				continue
			}
			switch f[0] {
			case "chain":
				c = &otherChain{name: f[1]}
				t.chains[c.name] = c
			case "set", "map":
				set = f[1]
				t.sets[set] = newOtherSet(nil)
			}
		case set != "" && f[0] == "elements":
			if strings.HasSuffix(line, "}") {
				t.sets[set] = newOtherSet(parseElements(line))
			} else {
				pending = []string{line}
			}
		case c != nil && f[0] == "type":
			if err := c.parseBase(line); err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
		case c != nil:
			c.rules = append(c.rules, otherRule{text: line, toks: tokenize(line)})
		}
	}
	if pending != nil {
		return nil, fmt.Errorf("unterminated elements list %q", pending[0])
	}
	o.index()
	return o, nil
}

// parseBase reads "type nat hook prerouting priority dstnat; policy accept;".
func (c *otherChain) parseBase(line string) error {
	for _, part := range strings.Split(line, ";") {
		f := strings.Fields(part)
		switch {
		case len(f) >= 4 && f[0] == "type" && f[2] == "hook":
			// "type filter hook ingress device "eth0" priority 0" names a
			// device before the priority.
			c.base, c.hook = true, f[3]
			i := slices.Index(f, "priority")
			if i < 0 {
				continue
			}
			p, err := parsePriority(strings.Join(f[i+1:], " "))
			if err != nil {
				return fmt.Errorf("chain %s: %w", c.name, err)
			}
			c.priority = p
		case len(f) == 2 && f[0] == "policy":
			c.policy = f[1]
		}
	}
	return nil
}

// parsePriority reads "dstnat", "-100", "dstnat - 10", "filter + 10".
func parsePriority(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("no priority")
	}
	base, ok := namedPriorities[f[0]]
	if !ok {
		n, err := strconv.Atoi(f[0])
		if err != nil {
			return 0, fmt.Errorf("priority %q", s)
		}
		base = n
	}
	if len(f) == 3 {
		n, err := strconv.Atoi(f[2])
		if err != nil || f[1] != "+" && f[1] != "-" {
			return 0, fmt.Errorf("priority %q", s)
		}
		if f[1] == "-" {
			n = -n
		}
		base += n
	} else if len(f) != 1 {
		return 0, fmt.Errorf("priority %q", s)
	}
	return base, nil
}

// Tables names the tables read, as "family name".
func (o *Others) Tables() []string {
	out := make([]string, len(o.tables))
	for i, t := range o.tables {
		out[i] = t.name
	}
	return out
}

// otherBase is a base chain with its table.
type otherBase struct {
	t *otherTable
	c *otherChain
}

// index finds, for each hook, the base chains that run no later than the
// dataplane's nat chain (priority dstnat): by priority, then table name.
// At equal priority the kernel's order is its registration order, which a
// listing does not show: such a chain may run first.
func (o *Others) index() {
	o.hooks = map[string][]otherBase{}
	for _, t := range o.tables {
		for _, c := range t.chains {
			if c.base && c.priority <= namedPriorities["dstnat"] {
				o.hooks[c.hook] = append(o.hooks[c.hook], otherBase{t, c})
			}
		}
	}
	for _, list := range o.hooks {
		slices.SortFunc(list, func(a, b otherBase) int {
			return cmp.Or(cmp.Compare(a.c.priority, b.c.priority), cmp.Compare(a.t.name, b.t.name), cmp.Compare(a.c.name, b.c.name))
		})
	}
}
