package nftnl

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// concatField is a field a concatenation may hold.
type concatField uint8

const (
	fieldSaddr concatField = iota
	fieldDaddr
	fieldL4proto
	fieldDport
)

// register is nft's name for the register of 32-bit slot s: a whole
// 16-byte register (1 to 4) when the slot starts one, else the 32-bit
// register (8 to 23).
func register(slot int) uint32 {
	if slot%4 == 0 {
		return uint32(slot/4 + 1)
	}
	return uint32(slot + 8)
}

// addrField is the payload of a source or destination address.
func (c *compiler) addrField(f concatField) (offset, size uint32) {
	switch {
	case c.ipv6 && f == fieldSaddr:
		return 8, 16
	case c.ipv6:
		return 24, 16
	case f == fieldSaddr:
		return 12, 4
	}
	return 16, 4
}

// load emits the load of field f into 32-bit slot slot and returns the
// slots it takes.
func (c *compiler) load(f concatField, slot int) int {
	reg := register(slot)
	switch f {
	case fieldL4proto:
		c.emit(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg})
		return 1
	case fieldDport:
		c.emit(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
		return 1
	}
	off, size := c.addrField(f)
	c.emit(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: size})
	return int(size / 4)
}

// addrMatch reads a statement starting "ip saddr" or "ip daddr" (ip6 in
// an ip6 table).
func (c *compiler) addrMatch() {
	if c.tok != c.ipX {
		c.fail(c.tok + " in a table of the other family")
		return
	}
	c.next()
	f, ok := c.addrKey()
	if !ok {
		return
	}
	if c.tok == "." {
		c.concat(f)
		return
	}
	op := c.op()
	switch {
	case strings.HasPrefix(c.tok, "@"):
		c.load(f, 0)
		c.emit(&expr.Lookup{SourceRegister: 1, SetName: c.setName(), Invert: op == expr.CmpOpNeq})
	case c.tok == "{":
		c.addrSet(f, op)
	default:
		p := c.prefix()
		if c.err == nil {
			c.prefixMatch(f, op, p)
		}
	}
}

// addrKey reads "saddr" or "daddr".
func (c *compiler) addrKey() (concatField, bool) {
	f := fieldSaddr
	switch c.tok {
	case "saddr":
	case "daddr":
		f = fieldDaddr
	default:
		c.fail("want saddr or daddr")
		return 0, false
	}
	c.next()
	return f, true
}

// setName reads "@name".
func (c *compiler) setName() string {
	name := c.tok[1:]
	if name == "" || strings.ContainsAny(name, "{}\"@,") {
		c.fail("want @set")
		return ""
	}
	c.next()
	return name
}

// prefix reads an address or prefix of the table's family.
func (c *compiler) prefix() netip.Prefix {
	var p netip.Prefix
	var err error
	if strings.IndexByte(c.tok, '/') >= 0 {
		p, err = netip.ParsePrefix(c.tok)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(c.tok); err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil || p.Addr().Is6() != c.ipv6 || p.Addr().Zone() != "" || p.Bits() == 0 || p.Masked() != p {
		c.fail("want an address or prefix of the family")
		return netip.Prefix{}
	}
	c.next()
	return p
}

// prefixMatch compares field f to p as nft does: only the prefix's
// bytes when it ends on a byte, else the whole address masked.
func (c *compiler) prefixMatch(f concatField, op expr.CmpOp, p netip.Prefix) {
	off, size := c.addrField(f)
	addr := p.Addr().AsSlice()
	bits := p.Bits()
	if bits%8 == 0 {
		n := uint32(bits / 8)
		c.emit(&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: op, Register: 1, Data: addr[:n]})
		return
	}
	mask := make([]byte, size)
	for i := 0; i < bits; i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	c.emit(&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: size},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: size, Mask: mask, Xor: make([]byte, size)},
		&expr.Cmp{Op: op, Register: 1, Data: addr})
}

// addrSet reads "{ a , b/n , ... }": nft matches a single element as the
// element itself, and several through an anonymous interval set.
func (c *compiler) addrSet(f concatField, op expr.CmpOp) {
	c.next()
	var list []netip.Prefix
	for c.err == nil {
		list = append(list, c.prefix())
		if c.tok == "}" {
			c.next()
			break
		}
		c.expect(",")
	}
	if c.err != nil {
		return
	}
	if len(list) == 1 {
		c.prefixMatch(f, op, list[0])
		return
	}
	c.load(f, 0)
	tf := typeofFields[slices.IndexFunc(typeofFields, func(t typeofField) bool {
		return t.text == c.ipX+[...]string{" saddr", " daddr"}[f]
	})]
	c.out.Anon = &Anon{field: tf, elems: intervalElems(list)}
	c.emit(&expr.Lookup{SourceRegister: 1, SetName: "__set%d", Invert: op == expr.CmpOpNeq})
}

// concat reads "a . b . c" after its first field, then "vmap @map" or
// "@set".
func (c *compiler) concat(first concatField) {
	slot := c.load(first, 0)
	for c.tok == "." && c.err == nil {
		var f concatField
		switch c.next() {
		case c.ipX:
			c.next()
			var ok bool
			if f, ok = c.addrKey(); !ok {
				return
			}
			slot += c.load(f, slot)
			continue
		case "meta", "th":
			want := "meta l4proto"
			f = fieldL4proto
			if c.tok == "th" {
				want, f = "th dport", fieldDport
			}
			if c.next(); c.tok != want[strings.IndexByte(want, ' ')+1:] {
				c.fail("want " + want)
				return
			}
		default:
			c.fail("want a concatenation field")
			return
		}
		c.next()
		slot += c.load(f, slot)
	}
	vmap := c.tok == "vmap"
	if vmap {
		c.next()
	}
	if !strings.HasPrefix(c.tok, "@") {
		c.fail("want @set after a concatenation")
		return
	}
	c.emit(&expr.Lookup{SourceRegister: 1, SetName: c.setName(), IsDestRegSet: vmap})
}

// dnat reads "dnat to ADDR:PORT" or "dnat ip addr . port to numgen
// random mod N offset K map @map".
func (c *compiler) dnat() {
	family := uint32(unix.NFPROTO_IPV4)
	if c.ipv6 {
		family = unix.NFPROTO_IPV6
	}
	if c.next() == "to" {
		ap, err := netip.ParseAddrPort(c.next())
		if err != nil || ap.Addr().Is6() != c.ipv6 || ap.Addr().Zone() != "" || ap.Addr().Is4In6() {
			c.fail("want ADDR:PORT of the family")
			return
		}
		c.next()
		port := []byte{byte(ap.Port() >> 8), byte(ap.Port())}
		c.emit(&expr.Immediate{Register: 1, Data: ap.Addr().AsSlice()}, &expr.Immediate{Register: 2, Data: port},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: 1, RegProtoMin: 2, Specified: true})
		return
	}
	if !c.expect(c.ipX, "addr", ".", "port", "to") {
		return
	}
	if c.tok == c.ipX {
		c.dnatKeyed(family)
		return
	}
	if !c.expect("numgen", "random", "mod") {
		return
	}
	mod := c.number()
	if !c.expect("offset") {
		return
	}
	off := c.number()
	if !c.expect("map") {
		return
	}
	if !strings.HasPrefix(c.tok, "@") || mod == 0 {
		c.fail("want @map")
		return
	}
	name := c.setName()
	proto := uint32(9) // the port's slot after a 4-byte address
	if c.ipv6 {
		proto = 2
	}
	c.emit(&expr.Numgen{Register: 1, Modulus: mod, Type: unix.NFT_NG_RANDOM, Offset: off},
		&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: name},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: 1, RegProtoMin: proto})
}

// dnatKeyed reads the rest of "dnat ip addr . port to ip daddr . P dport
// . numgen random mod N map @map", an endpoint map keyed by destination
// and endpoint index. As nft does, it loads the three into consecutive
// registers after the protocol match "P dport" implies.
func (c *compiler) dnatKeyed(family uint32) {
	if !c.expect(c.ipX, "daddr", ".") {
		return
	}
	proto, ok := protoNumber(c.tok)
	if !ok || protoName(proto) != c.tok {
		c.fail("want tcp, udp or sctp")
		return
	}
	c.next()
	if !c.expect("dport", ".", "numgen", "random", "mod") {
		return
	}
	mod := c.number()
	if !c.expect("map") {
		return
	}
	if !strings.HasPrefix(c.tok, "@") || mod == 0 {
		c.fail("want @map")
		return
	}
	name := c.setName()
	c.emit(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}})
	slot := c.load(fieldDaddr, 0)
	port := register(slot)
	slot += c.load(fieldDport, slot)
	c.emit(&expr.Numgen{Register: register(slot), Modulus: mod, Type: unix.NFT_NG_RANDOM},
		&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: name},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: family, RegAddrMin: 1, RegProtoMin: port})
}

// numgenVmap reads "numgen random mod N vmap { 0 : VERDICT , ... }".
func (c *compiler) numgenVmap() {
	c.next()
	if !c.expect("random", "mod") {
		return
	}
	mod := c.number()
	if !c.expect("vmap", "{") || mod == 0 {
		c.fail("want vmap { ... }")
		return
	}
	a := &Anon{isMap: true}
	for c.err == nil {
		k := c.number()
		if !c.expect(":") {
			return
		}
		v := c.verdict()
		if v == nil {
			return
		}
		a.elems = append(a.elems, anonElem{key: hostU32(k), verdict: v})
		if c.tok == "}" {
			c.next()
			break
		}
		c.expect(",")
	}
	c.out.Anon = a
	c.emit(&expr.Numgen{Register: 1, Modulus: mod, Type: unix.NFT_NG_RANDOM},
		&expr.Lookup{SourceRegister: 1, IsDestRegSet: true, SetName: "__map%d"})
}

// update reads "update @set { ip saddr }".
func (c *compiler) update() {
	c.next()
	if !strings.HasPrefix(c.tok, "@") {
		c.fail("want @set")
		return
	}
	name := c.setName()
	if !c.expect("{", c.ipX, "saddr", "}") {
		return
	}
	c.load(fieldSaddr, 0)
	c.emit(&expr.Dynset{SrcRegKey: 1, SetName: name, Operation: unix.NFT_DYNSET_OP_UPDATE})
}

// intervalElems turns prefixes into nft's interval elements: the ranges
// sorted and merged where they overlap or touch, each a start element and
// an end element one past it (none when it ends at the last address), and
// first the zero end element nft 1.0.6 sends.
func intervalElems(list []netip.Prefix) []anonElem {
	type rng struct{ lo, hi netip.Addr }
	rs := make([]rng, len(list))
	for i, p := range list {
		rs[i] = rng{p.Masked().Addr(), lastAddr(p)}
	}
	slices.SortFunc(rs, func(a, b rng) int { return a.lo.Compare(b.lo) })
	merged := rs[:1]
	for _, r := range rs[1:] {
		last := &merged[len(merged)-1]
		if n := last.hi.Next(); !n.IsValid() || r.lo.Compare(n) <= 0 {
			if r.hi.Compare(last.hi) > 0 {
				last.hi = r.hi
			}
			continue
		}
		merged = append(merged, r)
	}
	var out []anonElem
	if !merged[0].lo.IsUnspecified() {
		out = append(out, anonElem{key: make([]byte, merged[0].lo.BitLen()/8), end: true})
	}
	for _, r := range merged {
		out = append(out, anonElem{key: r.lo.AsSlice()})
		if n := r.hi.Next(); n.IsValid() {
			out = append(out, anonElem{key: n.AsSlice(), end: true})
		}
	}
	return out
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func uitoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
