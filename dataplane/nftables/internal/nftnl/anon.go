package nftnl

import (
	"bytes"
	"net/netip"
	"reflect"
	"slices"
	"strings"
)

// String is the set as the rule's text writes it: "{ a , b }".
func (a *Anon) String() string {
	if a == nil {
		return ""
	}
	var parts []string
	if a.isMap {
		for _, e := range a.elems {
			k, _ := valueText([]kind{kInteger}, e.key)
			parts = append(parts, k+" : "+verdictText(e.verdict))
		}
	} else {
		ps, _ := a.prefixes()
		for _, p := range ps {
			parts = append(parts, p.String())
		}
	}
	return "{ " + strings.Join(parts, " , ") + " }"
}

// sorted is the elements in key order, starts before ends of one key.
func (a *Anon) sorted() []anonElem {
	es := slices.Clone(a.elems)
	slices.SortStableFunc(es, func(x, y anonElem) int {
		if c := bytes.Compare(x.key, y.key); c != 0 {
			return c
		}
		switch {
		case x.end == y.end:
			return 0
		case x.end:
			return 1
		}
		return -1
	})
	return es
}

// prefixes reads an interval set back as the fewest prefixes that cover
// its ranges.
func (a *Anon) prefixes() ([]netip.Prefix, bool) {
	var out []netip.Prefix
	var start netip.Addr
	open := false
	for _, e := range a.sorted() {
		addr, ok := netip.AddrFromSlice(e.key)
		if !ok {
			return nil, false
		}
		switch {
		case !e.end && !open:
			start, open = addr, true
		case e.end && open:
			out = appendRange(out, start, addr.Prev())
			open = false
		case e.end && !open && addr.IsUnspecified():
			// nft's leading zero end element.
		default:
			return nil, false
		}
	}
	if open {
		last := lastAddr(netip.PrefixFrom(start, 0))
		out = appendRange(out, start, last)
	}
	if len(out) == 1 && out[0].Bits() < out[0].Addr().BitLen() {
		// One prefix alone would read as a plain match, not a set: say it
		// as its two halves, which the set merges back.
		p := out[0]
		lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
		out = []netip.Prefix{lo, netip.PrefixFrom(lastAddr(lo).Next(), p.Bits()+1)}
	}
	return out, len(out) > 0
}

// ranges reads an interval set back as nft lists it: each range as a
// prefix when it is one, else "first-last".
func (a *Anon) ranges() ([]string, bool) {
	ps, ok := a.prefixes()
	if !ok {
		return nil, false
	}
	var out []string
	for i := 0; i < len(ps); {
		lo, hi := ps[i].Masked().Addr(), lastAddr(ps[i])
		j := i + 1
		for ; j < len(ps) && lastAddr(ps[j-1]).Next() == ps[j].Addr(); j++ {
			hi = lastAddr(ps[j])
		}
		out = append(out, rangeText(lo, hi))
		i = j
	}
	return out, true
}

// rangeText is lo to hi as nft prints it: an address, a prefix, or
// "lo-hi".
func rangeText(lo, hi netip.Addr) string {
	if lo == hi {
		return lo.String()
	}
	for bits := lo.BitLen() - 1; bits >= 0; bits-- {
		p := netip.PrefixFrom(lo, bits)
		if p.Masked().Addr() != lo {
			break
		}
		if lastAddr(p) == hi {
			return p.String()
		}
	}
	return lo.String() + "-" + hi.String()
}

// appendRange appends the fewest prefixes covering lo to hi.
func appendRange(out []netip.Prefix, lo, hi netip.Addr) []netip.Prefix {
	for lo.Compare(hi) <= 0 {
		bits := lo.BitLen()
		// The widest prefix starting at lo that ends at or before hi.
		for bits > 0 {
			p := netip.PrefixFrom(lo, bits-1)
			if p.Masked().Addr() != lo || lastAddr(p).Compare(hi) > 0 {
				break
			}
			bits--
		}
		p := netip.PrefixFrom(lo, bits)
		out = append(out, p)
		next := lastAddr(p).Next()
		if !next.IsValid() {
			break
		}
		lo = next
	}
	return out
}

// sameAnon compares a compiled set with one read back.
func sameAnon(a, b *Anon) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.isMap != b.isMap || len(a.elems) != len(b.elems) {
		return false
	}
	return reflect.DeepEqual(a.sorted(), b.sorted())
}
