package nftnl

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// Compiled is a rule's text compiled to the expressions nft 1.0.6 writes
// for it, with nft's register numbering.
type Compiled struct {
	Exprs []expr.Any
	// Anon is the anonymous set or map the rule's lookup names; nil when
	// the rule has none. A rule of the dataplane's shapes has at most one.
	Anon *Anon
}

// Anon is an anonymous set or map: it lives in the transaction that
// creates it, bound to its one rule.
type Anon struct {
	// isMap is numgen's verdict map, keyed by numgen value; otherwise the
	// set holds address intervals matched by field.
	isMap bool
	field typeofField
	elems []anonElem
}

type anonElem struct {
	key     []byte
	end     bool
	verdict *expr.Verdict
}

// SyntaxError is returned for rule text outside the shapes nftnl compiles.
type SyntaxError struct {
	Rule string
	// Pos is the byte offset in Rule where compiling stopped.
	Pos    int
	Reason string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("nftnl: cannot compile rule %q at %d: %s", e.Rule, e.Pos, e.Reason)
}

// compiler holds the state of one Compile: the tokens are read in place,
// without splitting the text into a slice.
type compiler struct {
	text string
	pos  int
	// tok is the current token, text[tokPos:pos].
	tok    string
	tokPos int
	ipv6   bool
	ipX    string
	out    Compiled
	err    *SyntaxError
}

// Compile compiles one rule's text, as knftables.Rule.Rule holds it, for
// a table of family (knftables.IPv4Family or IPv6Family).
func Compile(family knftables.Family, text string) (*Compiled, error) {
	c := compiler{text: text}
	switch family {
	case knftables.IPv4Family:
		c.ipX = "ip"
	case knftables.IPv6Family:
		c.ipv6, c.ipX = true, "ip6"
	default:
		return nil, &SyntaxError{Rule: text, Reason: "family " + string(family) + " is neither ip nor ip6"}
	}
	c.out.Exprs = make([]expr.Any, 0, 8)
	c.next()
	for c.tok != "" && c.err == nil {
		c.statement()
	}
	if c.err != nil {
		return nil, c.err
	}
	if len(c.out.Exprs) == 0 {
		return nil, &SyntaxError{Rule: text, Reason: "empty rule"}
	}
	return &c.out, nil
}

// next moves to the next space-separated token; "" at the end.
func (c *compiler) next() string {
	for c.pos < len(c.text) && c.text[c.pos] == ' ' {
		c.pos++
	}
	c.tokPos = c.pos
	for c.pos < len(c.text) && c.text[c.pos] != ' ' {
		c.pos++
	}
	c.tok = c.text[c.tokPos:c.pos]
	return c.tok
}

func (c *compiler) fail(reason string) {
	if c.err == nil {
		c.err = &SyntaxError{Rule: c.text, Pos: c.tokPos, Reason: reason}
	}
	c.tok = ""
}

// expect consumes the current token, which must be want.
func (c *compiler) expect(want ...string) bool {
	for _, w := range want {
		if c.tok != w {
			c.fail(fmt.Sprintf("want %q, have %q", w, c.tok))
			return false
		}
		c.next()
	}
	return true
}

func (c *compiler) emit(e ...expr.Any) { c.out.Exprs = append(c.out.Exprs, e...) }

func (c *compiler) statement() {
	switch c.tok {
	case "ct":
		c.ct()
	case "ip", "ip6":
		c.addrMatch()
	case "meta":
		c.meta()
	case "fib":
		c.fib()
	case "iifname":
		c.iifname()
	case "mark":
		c.mark()
	case "masquerade":
		c.next()
		c.expect("fully-random")
		c.emit(&expr.Masq{FullyRandom: true})
	case "reject":
		c.next()
		code := uint8(3) // ICMP port unreachable
		if c.ipv6 {
			code = 4 // ICMPv6 port unreachable
		}
		c.emit(&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code})
	case "drop", "accept", "jump", "goto":
		if v := c.verdict(); v != nil {
			c.emit(v)
		}
	case "dnat":
		c.dnat()
	case "numgen":
		c.numgenVmap()
	case "update":
		c.update()
	default:
		c.fail("unknown statement " + strconv.Quote(c.tok))
	}
}

// verdict reads "drop", "accept", "jump CHAIN" or "goto CHAIN".
func (c *compiler) verdict() *expr.Verdict {
	switch c.tok {
	case "drop":
		c.next()
		return &expr.Verdict{Kind: expr.VerdictDrop}
	case "accept":
		c.next()
		return &expr.Verdict{Kind: expr.VerdictAccept}
	case "jump", "goto":
		k := expr.VerdictJump
		if c.tok == "goto" {
			k = expr.VerdictGoto
		}
		chain := c.next()
		if chain == "" || strings.ContainsAny(chain, "{}\"@,") {
			c.fail("want a chain name")
			return nil
		}
		c.next()
		return &expr.Verdict{Kind: k, Chain: chain}
	}
	c.fail("want a verdict")
	return nil
}

// hostU32 is v in host byte order, as meta, ct and fib values are.
func hostU32(v uint32) []byte { return binary.NativeEndian.AppendUint32(make([]byte, 0, 4), v) }

func (c *compiler) ct() {
	var key expr.CtKey
	var bit uint32
	switch c.next() {
	case "state":
		key, bit = expr.CtKeySTATE, 0x8 // new
		c.next()
		c.expect("new")
	case "status":
		key, bit = expr.CtKeySTATUS, 0x20 // dnat
		c.next()
		c.expect("dnat")
	default:
		c.fail("want ct state or ct status")
		return
	}
	c.emit(&expr.Ct{Register: 1, Key: key},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(bit), Xor: hostU32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: hostU32(0)})
}

func (c *compiler) fib() {
	f := &expr.Fib{Register: 1, ResultADDRTYPE: true}
	switch c.next() {
	case "saddr":
		f.FlagSADDR = true
	case "daddr":
		f.FlagDADDR = true
	default:
		c.fail("want fib saddr or fib daddr")
		return
	}
	c.next()
	if c.expect("type", "local") {
		c.emit(f, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hostU32(unix.RTN_LOCAL)})
	}
}

// op reads an optional "!=".
func (c *compiler) op() expr.CmpOp {
	if c.tok == "!=" {
		c.next()
		return expr.CmpOpNeq
	}
	return expr.CmpOpEq
}

func (c *compiler) iifname() {
	c.next()
	op := c.op()
	q := c.tok
	if len(q) < 3 || q[0] != '"' || q[len(q)-1] != '"' || len(q)-2 > unix.IFNAMSIZ-1 || strings.ContainsRune(q[1:len(q)-1], '"') {
		c.fail("want a quoted interface name")
		return
	}
	name := q[1 : len(q)-1]
	var data []byte
	if prefix, ok := strings.CutSuffix(name, "*"); ok {
		// A wildcard compares the prefix's bytes alone.
		data = []byte(prefix)
	} else {
		data = make([]byte, unix.IFNAMSIZ)
		copy(data, name)
	}
	if len(data) == 0 {
		c.fail("empty interface name")
		return
	}
	c.next()
	c.emit(&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: data})
}

// number reads a decimal or 0x-hexadecimal 32-bit number.
func (c *compiler) number() uint32 {
	n, err := strconv.ParseUint(c.tok, 0, 32)
	if err != nil {
		c.fail("want a 32-bit number")
		return 0
	}
	c.next()
	return uint32(n)
}

// mark reads "mark and M != 0" or "mark set mark or|xor M".
func (c *compiler) mark() {
	load := &expr.Meta{Key: expr.MetaKeyMARK, Register: 1}
	switch c.next() {
	case "and":
		c.next()
		m := c.number()
		if !c.expect("!=", "0") {
			return
		}
		c.emit(load, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(m), Xor: hostU32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: hostU32(0)})
	case "set":
		c.next()
		if !c.expect("mark") {
			return
		}
		or := c.tok == "or"
		if !or && c.tok != "xor" {
			c.fail("want or or xor")
			return
		}
		c.next()
		m := c.number()
		mask := uint32(0xffffffff)
		if or {
			mask = ^m
		}
		c.emit(load, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: hostU32(mask), Xor: hostU32(m)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1})
	default:
		c.fail("want mark and or mark set")
	}
}

// l4proto reads a protocol name.
func (c *compiler) l4proto() (string, byte) {
	p := c.tok
	switch p {
	case "tcp", "udp", "sctp":
		n, _ := protoNumber(p)
		c.next()
		return p, n
	}
	c.fail("want tcp, udp or sctp")
	return "", 0
}

// meta reads "meta l4proto PROTO" or a concatenation starting with
// "meta l4proto".
func (c *compiler) meta() {
	c.next()
	if !c.expect("l4proto") {
		return
	}
	if c.tok == "." {
		c.concat(fieldL4proto)
		return
	}
	_, n := c.l4proto()
	c.emit(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{n}})
}
