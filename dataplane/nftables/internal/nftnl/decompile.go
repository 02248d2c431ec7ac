package nftnl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// DecompileError is returned for expressions that are not what Compile
// makes of any text: a rule another program wrote, or one changed since.
type DecompileError struct {
	// Text is what could be read, up to where reading stopped.
	Text   string
	Reason string
}

func (e *DecompileError) Error() string {
	return fmt.Sprintf("nftnl: rule not recognised after %q: %s", e.Text, e.Reason)
}

// decompiler reads expressions back into text.
type decompiler struct {
	ex   []expr.Any
	i    int
	ipX  string
	anon *Anon
	out  []string
	// listing asks for nft's listing syntax instead of Compile's.
	listing bool
}

// Decompile is Compile backwards: the text whose compilation gives exprs
// (and anon, the anonymous set or map its lookup names, nil when none).
// Reading is checked by compiling the text again, so anything but
// Compile's own output is a *DecompileError. The text is canonical: a
// braced set of one element reads as the element, and a set's elements
// read sorted, merged where they overlap or touch.
func Decompile(family knftables.Family, exprs []expr.Any, anon *Anon) (string, error) {
	d := decompiler{ex: exprs, ipX: "ip", anon: anon}
	if family == knftables.IPv6Family {
		d.ipX = "ip6"
	}
	for d.i < len(d.ex) {
		if err := d.statement(); err != nil {
			return "", err
		}
	}
	text := strings.Join(d.out, " ")
	c, err := Compile(family, text)
	if err != nil {
		return "", &DecompileError{Text: text, Reason: err.Error()}
	}
	if !sameExprs(c.Exprs, exprs) || !sameAnon(c.Anon, anon) {
		return "", &DecompileError{Text: text, Reason: "expressions differ from the text's"}
	}
	return text, nil
}

func (d *decompiler) fail(reason string) error {
	return &DecompileError{Text: strings.Join(d.out, " "), Reason: reason}
}

func (d *decompiler) peek(k int) expr.Any {
	if d.i+k < len(d.ex) {
		return d.ex[d.i+k]
	}
	return nil
}

func (d *decompiler) say(s ...string) { d.out = append(d.out, s...) }

// comma separates elements: " , " in Compile's text, ", " in nft's.
func (d *decompiler) comma() {
	if d.listing {
		d.out[len(d.out)-1] += ","
		return
	}
	d.say(",")
}

// listingText is exprs in nft's listing syntax; exprs must be what
// Decompile reads.
func listingText(family knftables.Family, exprs []expr.Any, anon *Anon) (string, error) {
	d := decompiler{ex: exprs, ipX: "ip", anon: anon, listing: true}
	if family == knftables.IPv6Family {
		d.ipX = "ip6"
	}
	for d.i < len(d.ex) {
		if err := d.statement(); err != nil {
			return "", err
		}
	}
	return strings.Join(d.out, " "), nil
}

func (d *decompiler) statement() error {
	switch e := d.ex[d.i].(type) {
	case *expr.Ct:
		return d.ct(e)
	case *expr.Payload:
		return d.payload(e)
	case *expr.Meta:
		return d.meta(e)
	case *expr.Fib:
		cmp, ok := d.peek(1).(*expr.Cmp)
		if !ok || cmp.Op != expr.CmpOpEq {
			return d.fail("fib without its comparison")
		}
		d.i += 2
		if e.FlagSADDR {
			d.say("fib saddr type local")
		} else {
			d.say("fib daddr type local")
		}
	case *expr.Masq:
		d.i++
		d.say("masquerade fully-random")
	case *expr.Reject:
		d.i++
		d.say("reject")
	case *expr.Verdict:
		d.i++
		d.say(verdictText(e))
	case *expr.Immediate:
		return d.dnatTo(e)
	case *expr.Numgen:
		return d.numgen(e)
	default:
		return d.fail(fmt.Sprintf("unexpected expression %T", e))
	}
	return nil
}

func verdictText(v *expr.Verdict) string {
	switch v.Kind {
	case expr.VerdictDrop:
		return "drop"
	case expr.VerdictAccept:
		return "accept"
	case expr.VerdictJump:
		return "jump " + v.Chain
	case expr.VerdictGoto:
		return "goto " + v.Chain
	}
	return "verdict-" + strconv.Itoa(int(v.Kind))
}

func (d *decompiler) ct(e *expr.Ct) error {
	d.i += 3
	switch e.Key {
	case expr.CtKeySTATE:
		d.say("ct state new")
	case expr.CtKeySTATUS:
		d.say("ct status dnat")
	default:
		return d.fail("ct key " + strconv.Itoa(int(e.Key)))
	}
	return nil
}

// field names a payload load; "" when it is not one of the dataplane's.
func (d *decompiler) field(e *expr.Payload) string {
	if e.Base == expr.PayloadBaseTransportHeader && e.Offset == 2 {
		return "th dport"
	}
	if e.Base != expr.PayloadBaseNetworkHeader {
		return ""
	}
	switch {
	case d.ipX == "ip" && e.Offset == 12, d.ipX == "ip6" && e.Offset == 8:
		return d.ipX + " saddr"
	case d.ipX == "ip" && e.Offset == 16, d.ipX == "ip6" && e.Offset == 24:
		return d.ipX + " daddr"
	}
	return ""
}

func (d *decompiler) payload(e *expr.Payload) error {
	name := d.field(e)
	if name == "" || name == "th dport" {
		return d.fail("payload load of no known field")
	}
	d.i++
	switch n := d.peek(0).(type) {
	case *expr.Payload, *expr.Meta:
		if l, ok := n.(*expr.Meta); ok && l.Register == 1 {
			break
		}
		if p, ok := n.(*expr.Payload); ok && p.DestRegister == 1 {
			break
		}
		return d.concat(name)
	case *expr.Lookup:
		d.i++
		d.say(name)
		if n.Invert {
			d.say("!=")
		}
		if strings.HasPrefix(n.SetName, "__set") {
			return d.anonSet()
		}
		d.say("@" + n.SetName)
		return nil
	case *expr.Dynset:
		d.i++
		d.say("update", "@"+n.SetName, "{", name, "}")
		return nil
	case *expr.Bitwise:
		cmp, ok := d.peek(1).(*expr.Cmp)
		if !ok {
			return d.fail("bitwise without its comparison")
		}
		d.i += 2
		bits := 0
		for _, b := range n.Mask {
			bits += popcount(b)
		}
		return d.addr(name, cmp, bits)
	case *expr.Cmp:
		d.i++
		return d.addr(name, n, len(n.Data)*8)
	}
	return d.fail("address load without a match")
}

func popcount(b byte) int {
	n := 0
	for ; b != 0; b &= b - 1 {
		n++
	}
	return n
}

// addr says "NAME [!=] ADDR[/BITS]".
func (d *decompiler) addr(name string, cmp *expr.Cmp, bits int) error {
	size := 4
	if d.ipX == "ip6" {
		size = 16
	}
	b := make([]byte, size)
	copy(b, cmp.Data)
	a, _ := netip.AddrFromSlice(b)
	d.say(name)
	if cmp.Op == expr.CmpOpNeq {
		d.say("!=")
	}
	if bits == size*8 {
		d.say(a.String())
	} else {
		d.say(netip.PrefixFrom(a, bits).String())
	}
	return nil
}

// anonSet says the braced elements of the rule's interval set.
func (d *decompiler) anonSet() error {
	if d.anon == nil || d.anon.isMap {
		return d.fail("lookup in an anonymous set that was not read")
	}
	if d.listing {
		rs, ok := d.anon.ranges()
		if !ok {
			return d.fail("anonymous set elements are not intervals")
		}
		d.say("{ " + strings.Join(rs, ", ") + " }")
		return nil
	}
	ps, ok := d.anon.prefixes()
	if !ok {
		return d.fail("anonymous set elements are not intervals")
	}
	d.say("{")
	for i, p := range ps {
		if i > 0 {
			d.say(",")
		}
		if p.IsSingleIP() {
			d.say(p.Addr().String())
		} else {
			d.say(p.String())
		}
	}
	d.say("}")
	return nil
}

// concat says "A . B . C [vmap] @set" from its loads after the first.
func (d *decompiler) concat(first string) error {
	parts := []string{first}
	for {
		switch n := d.peek(0).(type) {
		case *expr.Payload:
			f := d.field(n)
			if f == "" {
				return d.fail("payload load of no known field")
			}
			parts = append(parts, f)
		case *expr.Meta:
			if n.Key != expr.MetaKeyL4PROTO {
				return d.fail("meta load in a concatenation")
			}
			parts = append(parts, "meta l4proto")
		case *expr.Lookup:
			d.i++
			d.say(strings.Join(parts, " . "))
			if n.IsDestRegSet {
				d.say("vmap")
			}
			d.say("@" + n.SetName)
			return nil
		default:
			return d.fail("concatenation without its lookup")
		}
		d.i++
	}
}

func (d *decompiler) meta(e *expr.Meta) error {
	d.i++
	switch e.Key {
	case expr.MetaKeyL4PROTO:
		switch n := d.peek(0).(type) {
		case *expr.Cmp:
			d.i++
			if len(n.Data) != 1 {
				return d.fail("l4proto compared to more than a byte")
			}
			if d.dnatKeyed(protoName(n.Data[0])) {
				return nil
			}
			d.say("meta l4proto", protoName(n.Data[0]))
			return nil
		case *expr.Payload:
			return d.concat("meta l4proto")
		}
	case expr.MetaKeyIIFNAME:
		cmp, ok := d.peek(0).(*expr.Cmp)
		if !ok {
			break
		}
		d.i++
		name := string(bytes.TrimRight(cmp.Data, "\x00"))
		if len(cmp.Data) != unix.IFNAMSIZ {
			name += "*"
		}
		d.say("iifname")
		if cmp.Op == expr.CmpOpNeq {
			d.say("!=")
		}
		d.say(strconv.Quote(name))
		return nil
	case expr.MetaKeyMARK:
		return d.mark()
	}
	return d.fail("meta load without a match")
}

func (d *decompiler) mark() error {
	bw, ok := d.peek(0).(*expr.Bitwise)
	if !ok || len(bw.Mask) != 4 || len(bw.Xor) != 4 {
		return d.fail("mark without its bitwise")
	}
	mask, xor := binary.NativeEndian.Uint32(bw.Mask), binary.NativeEndian.Uint32(bw.Xor)
	switch n := d.peek(1).(type) {
	case *expr.Cmp:
		d.i += 2
		if d.listing {
			d.say(fmt.Sprintf("meta mark & 0x%08x != 0x00000000", mask))
		} else {
			d.say("mark and", hexU32(mask), "!= 0")
		}
	case *expr.Meta:
		d.i += 2
		op, val := "or", xor
		if mask == 0xffffffff {
			op = "xor"
		}
		if d.listing {
			d.say(fmt.Sprintf("meta mark set meta mark %s 0x%08x", map[string]string{"or": "|", "xor": "^"}[op], val))
		} else {
			d.say("mark set mark "+op, hexU32(val))
		}
		_ = n
	default:
		return d.fail("mark without its use")
	}
	return nil
}

func hexU32(v uint32) string { return "0x" + strconv.FormatUint(uint64(v), 16) }

// dnatKeyed says "dnat ip addr . port to ip daddr . P dport . numgen
// random mod N map @M" when the protocol match just read is that rule's
// dependency: a destination and port load, numgen, the lookup and NAT.
// Whether the registers are right, the check by compiling tells.
func (d *decompiler) dnatKeyed(proto string) bool {
	daddr, ok1 := d.peek(0).(*expr.Payload)
	dport, ok2 := d.peek(1).(*expr.Payload)
	ng, ok3 := d.peek(2).(*expr.Numgen)
	lk, ok4 := d.peek(3).(*expr.Lookup)
	_, ok5 := d.peek(4).(*expr.NAT)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || d.field(daddr) != d.ipX+" daddr" || d.field(dport) != "th dport" || ng.Offset != 0 {
		return false
	}
	d.i += 5
	key := []string{d.ipX, "daddr", ".", proto, "dport", ".", "numgen random mod", uitoa(ng.Modulus), "map", "@" + lk.SetName}
	if d.listing {
		d.say(append([]string{"dnat", d.ipX, "to"}, key...)...)
	} else {
		d.say(append([]string{"dnat", d.ipX, "addr . port to"}, key...)...)
	}
	return true
}

// dnatTo says "dnat to ADDR:PORT".
func (d *decompiler) dnatTo(addr *expr.Immediate) error {
	port, ok1 := d.peek(1).(*expr.Immediate)
	_, ok2 := d.peek(2).(*expr.NAT)
	if !ok1 || !ok2 || len(port.Data) != 2 {
		return d.fail("immediate that is no dnat")
	}
	d.i += 3
	a, ok := netip.AddrFromSlice(addr.Data)
	if !ok {
		return d.fail("dnat address of bad length")
	}
	d.say("dnat to", netip.AddrPortFrom(a, binary.BigEndian.Uint16(port.Data)).String())
	return nil
}

func (d *decompiler) numgen(ng *expr.Numgen) error {
	lk, ok := d.peek(1).(*expr.Lookup)
	if !ok {
		return d.fail("numgen without its lookup")
	}
	if _, isNAT := d.peek(2).(*expr.NAT); isNAT {
		d.i += 3
		switch {
		case !d.listing:
			d.say("dnat", d.ipX, "addr . port to numgen random mod", uitoa(ng.Modulus), "offset", uitoa(ng.Offset), "map", "@"+lk.SetName)
		case ng.Offset == 0:
			d.say("dnat", d.ipX, "to numgen random mod", uitoa(ng.Modulus), "map", "@"+lk.SetName)
		default:
			d.say("dnat", d.ipX, "to numgen random mod", uitoa(ng.Modulus), "offset", uitoa(ng.Offset), "map", "@"+lk.SetName)
		}
		return nil
	}
	d.i += 2
	if d.anon == nil || !d.anon.isMap {
		return d.fail("numgen vmap whose map was not read")
	}
	elems := slices.Clone(d.anon.elems)
	slices.SortFunc(elems, func(a, b anonElem) int {
		return int(binary.NativeEndian.Uint32(a.key)) - int(binary.NativeEndian.Uint32(b.key))
	})
	d.say("numgen random mod", uitoa(ng.Modulus), "vmap {")
	for i, e := range elems {
		if i > 0 {
			d.comma()
		}
		if len(e.key) != 4 || e.verdict == nil {
			return d.fail("numgen map element of bad shape")
		}
		d.say(uitoa(binary.NativeEndian.Uint32(e.key)), ":", verdictText(e.verdict))
	}
	d.say("}")
	return nil
}

// sameExprs compares expressions as written with expressions read back:
// set IDs and anonymous set numbers are the kernel's, and the kernel
// fills in NAT's maximum registers and flags.
func sameExprs(a, b []expr.Any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(normal(a[i]), normal(b[i])) {
			return false
		}
	}
	return true
}

func normal(e expr.Any) expr.Any {
	switch e := e.(type) {
	case *expr.Lookup:
		c := *e
		c.SetID, c.SetName = 0, anonName(c.SetName)
		return &c
	case *expr.Dynset:
		c := *e
		c.SetID = 0
		return &c
	case *expr.NAT:
		c := *e
		if c.RegAddrMax == c.RegAddrMin {
			c.RegAddrMax = 0
		}
		if c.RegProtoMax == c.RegProtoMin {
			c.RegProtoMax = 0
		}
		c.Specified = c.Specified || c.RegProtoMin != 0
		return &c
	}
	return e
}

// anonName is the template of an anonymous set's name.
func anonName(n string) string {
	for _, p := range []string{"__set", "__map"} {
		if strings.HasPrefix(n, p) {
			return p + "%d"
		}
	}
	return n
}
