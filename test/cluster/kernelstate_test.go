package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// kernelState is what one agent's mode programmed into its node's kernel,
// read back in a canonical form: two kernels that behave the same read
// the same, whatever order their objects were made in.
type kernelState struct {
	// Canonical is the state, one object per line: compared byte for
	// byte between a churned agent and a fresh one.
	Canonical string
	// Raw is what the tools printed (comments and counters removed, the
	// objects in the kernel's order), for information: a churned table
	// lists its chains in the order they were made.
	Raw string
	// Objects counts chains, rules, set and map elements, and listening
	// sockets; Listeners the listening sockets alone.
	Objects, Listeners int
}

// readKernelState reads node n's kernel as its agent's mode programs it:
// iptables-save (IPv4 and IPv6) for iptables; nft's JSON ruleset for
// nftables; for userspace iptables-save, the policy routing the mode adds
// and the listening sockets of its forwarders. Every mode's listening
// sockets are read (the agent's own servers are among them).
func readKernelState(n *Node, mode string) (kernelState, error) {
	var raw, canon []string
	objects := 0
	add := func(r, c string, count int) {
		raw, canon = append(raw, r), append(canon, c)
		objects += count
	}
	switch mode {
	case "iptables", "userspace":
		for _, tool := range []string{"iptables-save", "ip6tables-save"} {
			out, err := n.NS.Run(tool)
			if err != nil {
				return kernelState{}, err
			}
			c, count := canonicalIPTables(out, mode == "userspace")
			add(stripSaveNoise(out), c, count)
		}
	case "nftables":
		out, err := n.NS.Run("nft", "-j", "list", "ruleset")
		if err != nil {
			return kernelState{}, err
		}
		c, count, err := canonicalNFT([]byte(out))
		if err != nil {
			return kernelState{}, fmt.Errorf("%s: nft -j list ruleset: %w", n.Name, err)
		}
		text, err := n.NS.Run("nft", "list", "ruleset")
		if err != nil {
			return kernelState{}, err
		}
		add(counters.ReplaceAllString(text, "counter"), c, count)
	default:
		return kernelState{}, fmt.Errorf("no kernel reading for mode %q", mode)
	}
	if mode == "userspace" {
		for _, args := range [][]string{{"-4", "rule", "show"}, {"-4", "route", "show", "table", "20555"}} {
			out, err := n.NS.Run("ip", args...)
			if err != nil {
				if !strings.Contains(out, "table does not exist") {
					return kernelState{}, err
				}
				out = ""
			}
			add(out, out, 0)
		}
	}
	out, err := n.NS.Run("ss", "-Hltn")
	if err != nil {
		return kernelState{}, err
	}
	c, listeners := canonicalListeners(out)
	add(out, c, listeners)
	s := kernelState{Canonical: strings.Join(canon, "\n"), Raw: strings.Join(raw, "\n"), Objects: objects, Listeners: listeners}
	if mode == "userspace" {
		// Each forwarder listens on a port the kernel picked; the same
		// rules in the same places name other numbers after a restart.
		s.Canonical = renumberPorts(s.Canonical)
	}
	return s, nil
}

// stripSaveNoise removes iptables-save's comment lines (which carry the
// time) and the packet counters of built-in chains.
func stripSaveNoise(save string) string {
	var out []string
	for _, line := range strings.Split(save, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, chainCounters.ReplaceAllString(line, ""))
	}
	return strings.Join(out, "\n")
}

var (
	chainCounters = regexp.MustCompile(` \[\d+:\d+\]$`)
	counters      = regexp.MustCompile(`counter packets \d+ bytes \d+`)
)

// canonicalIPTables is iptables-save output with its tables in name order,
// each table's chains declared in name order and their rules grouped by
// chain in that order (a chain's own rules keep their order, which is
// meaning, unless sortRules), without comments and counters; and how many
// chains and rules it holds.
//
// Mode userspace's chains hold a rule or two per destination (cluster IP
// or node port), each matching its own, and a partial sync deletes a
// changed destination's rules and adds them back at the chain's top or
// end: their order is history, and sortRules compares them as a set
// (which also leaves the place of the chains' few fixed rules, the jump
// to node ports and the loopback return, unchecked).
func canonicalIPTables(save string, sortRules bool) (string, int) {
	type table struct {
		chains []string
		rules  map[string][]string
	}
	tables := map[string]*table{}
	var cur *table
	count := 0
	for _, line := range strings.Split(stripSaveNoise(save), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &table{rules: map[string][]string{}}
			tables[line] = cur
		case cur == nil, line == "COMMIT", line == "":
		case strings.HasPrefix(line, ":"):
			cur.chains = append(cur.chains, line)
			count++
		case strings.HasPrefix(line, "-A "):
			chain, _, _ := strings.Cut(line[3:], " ")
			cur.rules[chain] = append(cur.rules[chain], line)
			count++
		}
	}
	var b strings.Builder
	for _, name := range sortedKeys(tables) {
		tb := tables[name]
		slices.Sort(tb.chains)
		b.WriteString(name + "\n")
		for _, c := range tb.chains {
			b.WriteString(c + "\n")
		}
		for _, c := range tb.chains {
			chain, _, _ := strings.Cut(c[1:], " ")
			if sortRules {
				slices.Sort(tb.rules[chain])
			}
			for _, r := range tb.rules[chain] {
				b.WriteString(r + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String(), count
}

// canonicalNFT is nft's JSON ruleset as one object per line: tables, then
// sets and maps (their elements sorted), then chains, each kind in name
// order, then each chain's rules in their order; without handles, counter
// values and the tool's metainfo. It also counts chains, rules and
// elements.
//
// Where a service's endpoints sit in a map keyed by numgen value (the
// nftables dataplane's endpoint maps), the slot they sit at is history:
// a port keeps its slot while it lives, a new one takes the lowest free
// one. So a rule's lookup reads as the endpoints of its slot, its
// signature comment without the hash of the slot's number, and such a
// map as its slots' endpoint lists, sorted: an element no rule uses
// still shows, its slot's number does not.
func canonicalNFT(js []byte) (string, int, error) {
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return "", 0, err
	}
	type object struct {
		kind, key string
		line      []byte
	}
	var objs []object
	rules := map[string][]string{}
	count := 0
	slots := slotMaps(doc.Nftables)
	for _, entry := range doc.Nftables {
		for kind, o := range entry {
			if kind == "metainfo" {
				continue
			}
			delete(o, "handle")
			scrubCounters(o)
			id := fmt.Sprintf("%v %v", o["family"], o["table"])
			switch kind {
			case "set", "map":
				if elems, ok := o["elem"].([]any); ok {
					count += len(elems)
					sortJSON(elems)
					if m, ok := slots[fmt.Sprintf("%s @%v", id, o["name"])]; ok {
						var groups []any
						for g := range maps.Values(m) {
							groups = append(groups, g)
						}
						sortJSON(groups)
						o["elem"] = groups
					}
				}
			case "chain":
				count++
			case "rule":
				resolveSlots(o["expr"], id, slots)
				if c, ok := o["comment"].(string); ok {
					o["comment"] = slotSignature.ReplaceAllString(c, "pk:(signature)@(slot)")
				}
			}
			line, err := json.Marshal(map[string]any{kind: o})
			if err != nil {
				return "", 0, err
			}
			switch kind {
			case "rule":
				chain := fmt.Sprintf("%s %v", id, o["chain"])
				rules[chain] = append(rules[chain], string(line))
				count++
			case "table":
				objs = append(objs, object{"0", fmt.Sprintf("%v %v", o["family"], o["name"]), line})
			case "chain":
				objs = append(objs, object{"2", fmt.Sprintf("%s %v", id, o["name"]), line})
			default:
				objs = append(objs, object{"1" + kind, fmt.Sprintf("%s %v", id, o["name"]), line})
			}
		}
	}
	slices.SortFunc(objs, func(a, b object) int {
		if c := strings.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	var b bytes.Buffer
	for _, o := range objs {
		b.Write(o.line)
		b.WriteByte('\n')
	}
	for _, chain := range sortedKeys(rules) {
		for _, r := range rules[chain] {
			b.WriteString(r + "\n")
		}
	}
	return b.String(), count, nil
}

// slotSignature is the comment of a rule at an endpoint map slot: a hash
// of the rule (which names the slot) and the slot.
var slotSignature = regexp.MustCompile(`^pk:[0-9a-z]+@\d+$`)

// slotMaps are the ruleset's maps keyed by integers (numgen values), by
// "family table @name": each slot's values (key >> 16) in key order.
func slotMaps(entries []map[string]map[string]any) map[string]map[int][]any {
	out := map[string]map[int][]any{}
	for _, entry := range entries {
		o, ok := entry["map"]
		if !ok || o["type"] != "integer" {
			continue
		}
		elems, _ := o["elem"].([]any)
		type kv struct {
			key int
			v   any
		}
		var kvs []kv
		for _, e := range elems {
			pair, ok := e.([]any)
			if !ok || len(pair) != 2 {
				continue
			}
			if k, ok := pair[0].(float64); ok {
				kvs = append(kvs, kv{int(k), pair[1]})
			}
		}
		slices.SortFunc(kvs, func(a, b kv) int { return a.key - b.key })
		m := map[int][]any{}
		for _, e := range kvs {
			m[e.key>>16] = append(m[e.key>>16], e.v)
		}
		out[fmt.Sprintf("%v %v @%v", o["family"], o["table"], o["name"])] = m
	}
	return out
}

// resolveSlots rewrites, anywhere in v, a lookup of a numgen value in a
// slot map into the values of the slot it reads.
func resolveSlots(v any, id string, slots map[string]map[int][]any) {
	switch v := v.(type) {
	case map[string]any:
		if data, ok := v["data"].(string); ok {
			key, _ := v["key"].(map[string]any)
			ng, _ := key["numgen"].(map[string]any)
			off, isNum := ng["offset"].(float64)
			if m, ok := slots[id+" "+data]; ok && isNum {
				ng["offset"] = "(slot)"
				v["slot"] = m[int(off)>>16]
				return
			}
		}
		for _, x := range v {
			resolveSlots(x, id, slots)
		}
	case []any:
		for _, x := range v {
			resolveSlots(x, id, slots)
		}
	}
}

// scrubCounters zeroes the packet and byte counts anywhere in v.
func scrubCounters(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "packets" || k == "bytes" {
				v[k] = 0
				continue
			}
			scrubCounters(x)
		}
	case []any:
		for _, x := range v {
			scrubCounters(x)
		}
	}
}

// sortJSON sorts values by their JSON text: a set's elements are listed
// in its hash table's order.
func sortJSON(vs []any) {
	key := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	slices.SortFunc(vs, func(a, b any) int { return strings.Compare(key(a), key(b)) })
}

// canonicalListeners is ss -Hltn's listening sockets, local address only,
// sorted; and how many there are.
func canonicalListeners(ss string) (string, int) {
	var out []string
	for _, line := range strings.Split(ss, "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			out = append(out, "listen "+f[3])
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n"), len(out)
}

// forwarderPort matches where mode userspace names a forwarder's port:
// its REDIRECT, TPROXY and (node ports) DNAT targets, the rule of chain
// PKU-FORWARDERS that guards it (its comment names the destination) and
// a listening socket.
var forwarderPort = regexp.MustCompile(`(--to-ports |--on-port |--to-destination [0-9.]*:|--comment "forwarder of [^"]*" -m (?:tcp|udp) --dport |listen [0-9.*\[\]:]*:)(\d+)`)

// renumberPorts replaces each forwarder port in s by its rank among them
// in order of first appearance, so that two states that differ only in the
// ports the kernel handed out read the same; the listening sockets, after
// the rules, are renumbered with the rules' ranks, and the agent's own
// servers' well-known ports are left as they are.
func renumberPorts(s string) string {
	rank := map[string]string{"10249": "10249", "10256": "10256"}
	next := 0
	renumbered := forwarderPort.ReplaceAllStringFunc(s, func(m string) string {
		sub := forwarderPort.FindStringSubmatch(m)
		r, ok := rank[sub[2]]
		if !ok {
			next++
			r = "P" + strconv.Itoa(next)
			rank[sub[2]] = r
		}
		return sub[1] + r
	})
	// Renumbering changed the listeners' sort keys: sort them again.
	lines := strings.Split(renumbered, "\n")
	first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "listen ") })
	if first >= 0 {
		slices.Sort(lines[first:])
	}
	return strings.Join(lines, "\n")
}

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// stateDiff describes how two canonical states differ: the lines each
// holds that the other lacks, at most limit of each.
func stateDiff(a, b string, limit int) string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	var onlyA, onlyB []string
	for _, l := range sortedKeys(count) {
		for c := count[l]; c > 0 && len(onlyA) < limit; c-- {
			onlyA = append(onlyA, "- "+l)
		}
		for c := count[l]; c < 0 && len(onlyB) < limit; c++ {
			onlyB = append(onlyB, "+ "+l)
		}
	}
	if len(onlyA) == 0 && len(onlyB) == 0 {
		return "same lines, in another order"
	}
	return strings.Join(append(onlyA, onlyB...), "\n")
}
