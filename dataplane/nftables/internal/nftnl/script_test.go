package nftnl_test

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// scriptOps reads an nft -f script as knftables writes it back into the
// operations that wrote it, in its order, so that the same transaction
// can go through netlink.
func scriptOps(script string) ([]nftnl.Op, error) {
	var out []nftnl.Op
	for _, line := range strings.Split(strings.TrimSpace(script), "\n") {
		op, err := scriptOp(line)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		out = append(out, op)
	}
	return out, nil
}

func scriptOp(line string) (nftnl.Op, error) {
	f := strings.SplitN(line, " ", 5)
	if len(f) < 4 {
		return nftnl.Op{}, fmt.Errorf("short line")
	}
	verb := map[string]nftnl.Verb{"add": nftnl.Add, "flush": nftnl.Flush, "delete": nftnl.Delete}[f[0]]
	rest := ""
	if len(f) == 5 {
		rest = f[4]
	}
	name, body, _ := strings.Cut(rest, " ")
	switch f[1] {
	case "table":
		t := &knftables.Table{}
		if c, ok := props(rest)["comment"]; ok {
			t.Comment = &c
		}
		return nftnl.Op{Verb: verb, Obj: t}, nil
	case "chain":
		c := &knftables.Chain{Name: name}
		if p := props(body); len(p) > 0 {
			typ, hook, prio := knftables.BaseChainType(p["type"]), knftables.BaseChainHook(p["hook"]), knftables.BaseChainPriority(p["priority"])
			c.Type, c.Hook, c.Priority = &typ, &hook, &prio
		}
		return nftnl.Op{Verb: verb, Obj: c}, nil
	case "set", "map":
		p := props(body)
		var flags []knftables.SetFlag
		for _, fl := range strings.Split(p["flags"], ",") {
			if fl != "" {
				flags = append(flags, knftables.SetFlag(fl))
			}
		}
		var timeout *time.Duration
		if s, ok := p["timeout"]; ok {
			d, err := time.ParseDuration(s)
			if err != nil {
				return nftnl.Op{}, err
			}
			timeout = &d
		}
		var comment *string
		if c, ok := p["comment"]; ok {
			comment = &c
		}
		if f[1] == "map" {
			return nftnl.Op{Verb: verb, Obj: &knftables.Map{Name: name, Type: p["type"], TypeOf: p["typeof"], Flags: flags, Timeout: timeout, Comment: comment}}, nil
		}
		return nftnl.Op{Verb: verb, Obj: &knftables.Set{Name: name, Type: p["type"], TypeOf: p["typeof"], Flags: flags, Timeout: timeout, Comment: comment}}, nil
	case "element":
		inner := strings.TrimSuffix(strings.TrimPrefix(body, "{ "), " }")
		e := &knftables.Element{Set: name}
		key, value, isMap := strings.Cut(inner, " : ")
		if isMap {
			e.Set, e.Map, e.Value = "", name, []string{value}
		}
		if k, c, ok := strings.Cut(key, ` comment "`); ok {
			c = strings.TrimSuffix(c, `"`)
			key, e.Comment = k, &c
		}
		e.Key = []string{key}
		return nftnl.Op{Verb: verb, Obj: e}, nil
	case "rule":
		r := &knftables.Rule{Chain: name, Rule: body}
		if i := strings.LastIndex(body, ` comment "`); i >= 0 && strings.HasSuffix(body, `"`) {
			c := body[i+len(` comment "`) : len(body)-1]
			r.Rule, r.Comment = body[:i], &c
		}
		return nftnl.Op{Verb: verb, Obj: r}, nil
	}
	return nftnl.Op{}, fmt.Errorf("unknown object %q", f[1])
}

// props reads "{ type filter hook input priority 0 ; comment "x" ; }".
func props(s string) map[string]string {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "{"), "}"))
	out := map[string]string{}
	for _, part := range strings.Split(s, " ; ") {
		part = strings.TrimSuffix(strings.TrimSpace(part), " ;")
		words := strings.Fields(part)
		for len(words) >= 2 {
			k := words[0]
			if k == "comment" {
				out[k], _ = strconv.Unquote(strings.Join(words[1:], " "))
				break
			}
			if k == "type" || k == "typeof" {
				if k == "typeof" || !strings.Contains(part, " hook ") {
					out[k] = strings.Join(words[1:], " ")
					break
				}
			}
			out[k] = words[1]
			words = words[2:]
		}
	}
	return out
}
