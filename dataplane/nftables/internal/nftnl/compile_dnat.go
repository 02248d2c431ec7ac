package nftnl

import (
	"strings"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// dnatMap holds the expressions of the rule a cold sync writes once per
// service port, a chain's endpoint choice through an endpoint map ("meta
// l4proto P dnat ip addr . port to numgen random mod N offset K map @M"),
// reused from one such rule to the next: compiling it through Compile
// costs a tokenizer pass and seven allocations each.
type dnatMap struct {
	meta   expr.Meta
	cmp    expr.Cmp
	ng     expr.Numgen
	lookup expr.Lookup
	nat    expr.NAT
	proto  [1]byte
	exprs  [5]expr.Any
}

// compile compiles text into d, as Compile would, when text is exactly of
// that shape (single spaces, decimal numbers); ok is false for any other
// text, which Compile then reads.
func (d *dnatMap) compile(ipv6 bool, text string) (exprs []expr.Any, ok bool) {
	rest, ok := strings.CutPrefix(text, "meta l4proto ")
	if !ok {
		return nil, false
	}
	proto, rest, _ := strings.Cut(rest, " ")
	switch proto {
	case "tcp", "udp", "sctp":
	default:
		return nil, false
	}
	prefix, family, protoReg := "dnat ip addr . port to numgen random mod ", uint32(unix.NFPROTO_IPV4), uint32(9)
	if ipv6 {
		prefix, family, protoReg = "dnat ip6 addr . port to numgen random mod ", unix.NFPROTO_IPV6, 2
	}
	if rest, ok = strings.CutPrefix(rest, prefix); !ok {
		return nil, false
	}
	mod, rest, ok := cutDecimal(rest)
	if !ok || mod == 0 {
		return nil, false
	}
	if rest, ok = strings.CutPrefix(rest, "offset "); !ok {
		return nil, false
	}
	off, rest, ok := cutDecimal(rest)
	if !ok {
		return nil, false
	}
	name, ok := strings.CutPrefix(rest, "map @")
	if !ok || name == "" || strings.ContainsAny(name, " {}\"@,") {
		return nil, false
	}
	d.proto[0], _ = protoNumber(proto)
	d.meta = expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}
	d.cmp = expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: d.proto[:]}
	d.ng = expr.Numgen{Register: 1, Modulus: mod, Type: unix.NFT_NG_RANDOM, Offset: off}
	d.lookup = expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: name}
	d.nat = expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: 1, RegProtoMin: protoReg}
	d.exprs = [5]expr.Any{&d.meta, &d.cmp, &d.ng, &d.lookup, &d.nat}
	return d.exprs[:], true
}

// cutDecimal reads a 32-bit decimal number without leading zeros (which
// Compile would read as octal) followed by a space.
func cutDecimal(s string) (n uint32, rest string, ok bool) {
	i := 0
	var v uint64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && i < 10 {
		v = v*10 + uint64(s[i]-'0')
		i++
	}
	if i == 0 || i >= len(s) || s[i] != ' ' || v > 1<<32-1 || i > 1 && s[0] == '0' {
		return 0, s, false
	}
	return uint32(v), s[i+1:], true
}
