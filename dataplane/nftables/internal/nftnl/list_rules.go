package nftnl

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// RuleError is a rule ListRules could not read as text: not one Compile
// writes (another program's, or changed since it was written).
type RuleError struct {
	Chain  string
	Handle int
	Err    error
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("nftnl: rule %d of chain %s: %v", e.Handle, e.Chain, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }

// ListRules is knftables.Interface's ListRules: the rules of chain (of
// every chain when chain is ""), with their text read by Decompile, their
// comment and handle. A rule that does not read is a *RuleError.
func (c *Conn) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.tableExists(ctx); err != nil {
		return nil, err
	}
	if chain != "" {
		_, err := c.request(ctx, unix.NFT_MSG_GETCHAIN, false, func(w *buf) {
			w.str(unix.NFTA_CHAIN_TABLE, c.table)
			w.str(unix.NFTA_CHAIN_NAME, chain)
		})
		if err != nil {
			return nil, c.notFound("chain "+chain, err)
		}
	}
	rules, err := c.readRules(ctx, chain, false)
	if err != nil {
		return nil, err
	}
	out := make([]*knftables.Rule, len(rules))
	for i, r := range rules {
		out[i] = r.Rule
	}
	return out, nil
}

// ListRuleHeads is ListRules without the rules' text, as knftables'
// ListRules is: each rule's chain, comment and handle. It reads no
// expression, so that another program's rule (or one changed by hand)
// lists like any other, and costs a listing of the table's rules alone.
func (c *Conn) ListRuleHeads(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.tableExists(ctx); err != nil {
		return nil, err
	}
	rs, err := c.ruleDump(ctx, chain)
	if err != nil {
		return nil, err
	}
	out := make([]*knftables.Rule, 0, len(rs))
	for _, b := range rs {
		r, err := c.ruleHead(b)
		if err != nil {
			return nil, err
		}
		if r.Table == c.table {
			out = append(out, r)
		}
	}
	return out, nil
}

// ruleDump is the rules of chain (of every chain when chain is ""), as
// the kernel sends them.
func (c *Conn) ruleDump(ctx context.Context, chain string) ([][]byte, error) {
	rs, err := c.request(ctx, unix.NFT_MSG_GETRULE, true, func(w *buf) {
		w.str(unix.NFTA_RULE_TABLE, c.table)
		if chain != "" {
			w.str(unix.NFTA_RULE_CHAIN, chain)
		}
	})
	if err != nil {
		return nil, c.notFound("rules of chain "+chain, err)
	}
	return rs, nil
}

// readRule is a rule read back, its text read by Decompile.
type readRule struct {
	*knftables.Rule
	// listing is the rule in nft's listing syntax, when asked for.
	listing string
}

// readRules reads the rules of chain (of every chain when chain is ""),
// with nft's listing text too when listing is set.
func (c *Conn) readRules(ctx context.Context, chain string, listing bool) ([]readRule, error) {
	rs, err := c.ruleDump(ctx, chain)
	if err != nil {
		return nil, err
	}
	out := make([]readRule, 0, len(rs))
	for _, b := range rs {
		r, exprs, err := c.parseRule(b)
		if err != nil {
			return nil, err
		}
		if r.Table != c.table {
			continue
		}
		anon, err := c.anonOf(ctx, exprs)
		if err != nil {
			return nil, err
		}
		rr := readRule{Rule: r}
		if r.Rule, err = Decompile(c.family, exprs, anon); err == nil && listing {
			rr.listing, err = listingText(c.family, exprs, anon)
		}
		if err != nil {
			return nil, &RuleError{Chain: r.Chain, Handle: *r.Handle, Err: err}
		}
		out = append(out, rr)
	}
	return out, nil
}

func (c *Conn) parseRule(b []byte) (*knftables.Rule, []expr.Any, error) {
	return c.readRule(b, true)
}

// ruleHead is parseRule without the expressions.
func (c *Conn) ruleHead(b []byte) (*knftables.Rule, error) {
	r, _, err := c.readRule(b, false)
	return r, err
}

func (c *Conn) readRule(b []byte, withExprs bool) (*knftables.Rule, []expr.Any, error) {
	r := &knftables.Rule{Family: c.family}
	var exprs []expr.Any
	a := attrs{b: b}
	for a.next() {
		switch a.typ {
		case unix.NFTA_RULE_TABLE:
			r.Table = a.str()
		case unix.NFTA_RULE_CHAIN:
			r.Chain = a.str()
		case unix.NFTA_RULE_HANDLE:
			h := int(a.u64())
			r.Handle = &h
		case unix.NFTA_RULE_USERDATA:
			if s, ok := udataStringOf(a.val, udRuleComment); ok {
				r.Comment = &s
			}
		case unix.NFTA_RULE_EXPRESSIONS:
			if !withExprs {
				continue
			}
			var err error
			if exprs, err = c.parseExprs(a.val); err != nil {
				return nil, nil, err
			}
		}
	}
	if a.err != nil || r.Handle == nil {
		return nil, nil, fmt.Errorf("nftnl: unreadable rule in table %s", c.table)
	}
	return r, exprs, nil
}

// parseExprs decodes a rule's expressions; an expression of a kind
// Compile never writes is kept as unknown, so that Decompile refuses it
// instead of skipping it.
func (c *Conn) parseExprs(b []byte) ([]expr.Any, error) {
	var out []expr.Any
	l := attrs{b: b}
	for l.next() {
		var name string
		var data []byte
		a := attrs{b: l.val}
		for a.next() {
			switch a.typ {
			case unix.NFTA_EXPR_NAME:
				name = a.str()
			case unix.NFTA_EXPR_DATA:
				data = a.val
			}
		}
		e := newExpr(name)
		if e == nil {
			out = append(out, &unknownExpr{name: name})
			continue
		}
		if err := expr.Unmarshal(c.fam, data, e); err != nil {
			return nil, fmt.Errorf("nftnl: decode %s expression: %w", name, err)
		}
		if imm, ok := e.(*expr.Immediate); ok && imm.Register == unix.NFT_REG_VERDICT && len(imm.Data) == 0 {
			v := &expr.Verdict{}
			if err := expr.Unmarshal(c.fam, data, v); err != nil {
				return nil, err
			}
			e = v
		}
		out = append(out, e)
	}
	return out, l.err
}

// unknownExpr stands for an expression nftnl does not decode.
type unknownExpr struct {
	expr.Any
	name string
}

func newExpr(name string) expr.Any {
	switch name {
	case "ct":
		return &expr.Ct{}
	case "meta":
		return &expr.Meta{}
	case "cmp":
		return &expr.Cmp{}
	case "payload":
		return &expr.Payload{}
	case "lookup":
		return &expr.Lookup{}
	case "immediate":
		return &expr.Immediate{}
	case "bitwise":
		return &expr.Bitwise{}
	case "nat":
		return &expr.NAT{}
	case "dynset":
		return &expr.Dynset{}
	case "reject":
		return &expr.Reject{}
	case "masq":
		return &expr.Masq{}
	case "fib":
		return &expr.Fib{}
	case "numgen":
		return &expr.Numgen{}
	}
	return nil
}

// anonOf reads the anonymous set a rule's lookup names, nil when none.
func (c *Conn) anonOf(ctx context.Context, exprs []expr.Any) (*Anon, error) {
	for _, e := range exprs {
		l, ok := e.(*expr.Lookup)
		if !ok || !strings.HasPrefix(l.SetName, "__") {
			continue
		}
		elems, err := c.elements(ctx, l.SetName)
		if err != nil {
			return nil, err
		}
		a := &Anon{isMap: strings.HasPrefix(l.SetName, "__map")}
		for _, ke := range elems {
			a.elems = append(a.elems, anonElem{key: ke.key, end: ke.end, verdict: ke.verdict})
		}
		return a, nil
	}
	return nil, nil
}
