package ipvs

import (
	"bytes"
	"net/netip"

	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"golang.org/x/sys/unix"
)

// A virtual server's fingerprint is a sum of one hash per line the
// kernel's table (/proc/net/ip_vs) lists of it: its own (address,
// protocol, port, scheduler, whether it is persistent: the table gives
// the timeout in the kernel's jiffies, so a full Sync compares it from
// the virtual servers' dump instead) and one per real server
// (address, port, forwarding method, weight; the connection counters
// traffic moves left out). A sum does not depend on the order the table
// lists them in, so the desired table keeps the fingerprint each of its
// virtual servers must have, and the sum of those over the whole table
// (Dataplane.expect) as it changes, without reading the kernel: the
// canary compares the kernel's with that, and a full Sync dumps the real
// servers of only the virtual servers whose fingerprint differs.

// vsSum is the fingerprint the kernel's table lists for vs as wanted,
// every real server at weight 1.
func (d *Dataplane) vsSum(vs *virtualServer) uint64 {
	sum := lineSum(vs.key, hashString(d.cfg.Scheduler), vs.flags&handle.FlagPersistent != 0)
	for _, ap := range vs.dests {
		sum += rsSum(vs.key, ap, masq, 1)
	}
	return sum
}

// optsSum is the fingerprint of a virtual server's options, as the
// dump of the virtual servers gives them.
func (d *Dataplane) optsSum(k vsKey, sched string, flags, timeout uint32) uint64 {
	hi, lo := addrWords(k.addr)
	return finish(mix(mix(mix(mix(mix(mix(3, hi), lo), uint64(k.proto)<<16|uint64(k.port)), hashString(sched)), uint64(flags)), uint64(timeout)))
}

// entrySum is the fingerprint of a set member (of an address bound to
// the link, as a member of IPS).
func entrySum(e entry) uint64 {
	hi, lo := addrWords(e.ip)
	h := mix(mix(mix(4, hi), lo), uint64(e.proto)<<16|uint64(e.port))
	hi, lo = addrWords(e.ip2)
	return finish(mix(mix(mix(h, hi), lo), uint64(e.bits2)))
}

// masq is the hash of the forwarding method the dataplane programs, as
// the table names it.
var masq = hashString("Masq")

// lineSum is the hash of a virtual server's own line.
func lineSum(k vsKey, sched uint64, persistent bool) uint64 {
	hi, lo := addrWords(k.addr)
	p := uint64(0)
	if persistent {
		p = 1
	}
	return finish(mix(mix(mix(mix(mix(1, hi), lo), uint64(k.proto)<<16|uint64(k.port)), sched), p))
}

// rsSum is the hash of the line of real server ap of virtual server k.
func rsSum(k vsKey, ap netip.AddrPort, fwd uint64, weight int64) uint64 {
	return rsLine(rsBase(k), ap, fwd, weight)
}

// rsBase is what the lines of k's real servers hash first.
func rsBase(k vsKey) uint64 {
	hi, lo := addrWords(k.addr)
	return mix(mix(mix(2, hi), lo), uint64(k.proto)<<16|uint64(k.port))
}

func rsLine(base uint64, ap netip.AddrPort, fwd uint64, weight int64) uint64 {
	hi, lo := addrWords(ap.Addr())
	return finish(mix(mix(mix(mix(mix(base, hi), lo), uint64(ap.Port())), fwd), uint64(weight)))
}

func addrWords(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	return hi, lo
}

func mix(h, v uint64) uint64 { return (h ^ v) * 0x9e3779b97f4a7c15 }

// finish is splitmix64's finalizer, so that sums of nearby lines do not
// cancel out.
func finish(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

func hashBytes(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// scanTable calls fn with the key and fingerprint of every virtual
// server of the family (IPv6 when ipv6) that text, the kernel's table as
// /proc/net/ip_vs lists it, holds; firewall-mark services and lines it
// cannot read are left out. It allocates nothing.
func scanTable(text []byte, ipv6 bool, fn func(k vsKey, sum uint64)) {
	var cur vsKey
	var sum, base uint64
	open := false
	done := func() {
		if open {
			fn(cur, sum)
		}
		open = false
	}
	for line := range bytes.Lines(text) {
		first, rest := nextField(line)
		if len(first) == 0 {
			continue
		}
		if string(first) == "->" {
			if !open {
				continue
			}
			ap, rest := nextField(rest)
			fwd, rest := nextField(rest)
			weight, _ := nextField(rest)
			addr, ok := parseHexAddrPort(ap, ipv6)
			w, wok := parseDec(weight)
			if ok && wok {
				sum += rsLine(base, addr, hashBytes(fwd), w)
			}
			continue
		}
		done()
		proto := protoOf(first)
		ap, rest := nextField(rest)
		addr, ok := parseHexAddrPort(ap, ipv6)
		if proto == 0 || !ok {
			continue
		}
		sched, rest := nextField(rest)
		flag, rest := nextField(rest)
		if string(flag) == "ops" {
			flag, _ = nextField(rest)
		}
		cur = vsKey{addr.Addr(), proto, addr.Port()}
		sum, base, open = lineSum(cur, hashBytes(sched), string(flag) == "persistent"), rsBase(cur), true
	}
	done()
}

func protoOf(b []byte) uint16 {
	switch string(b) {
	case "TCP":
		return unix.IPPROTO_TCP
	case "UDP":
		return unix.IPPROTO_UDP
	case "SCTP":
		return unix.IPPROTO_SCTP
	}
	return 0
}

// parseHexAddrPort reads the table's "0A600001:0050" (IPv4) or
// "[fd00:0000:…:000a]:0050" (IPv6); ok is false for the other family.
func parseHexAddrPort(b []byte, ipv6 bool) (netip.AddrPort, bool) {
	i := bytes.LastIndexByte(b, ':')
	if i < 0 {
		return netip.AddrPort{}, false
	}
	port, ok := parseHex(b[i+1:])
	if !ok || port > 0xffff {
		return netip.AddrPort{}, false
	}
	a := b[:i]
	if !ipv6 {
		v, ok := parseHex(a)
		if !ok || len(a) != 8 {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), uint16(port)), true
	}
	if len(a) < 2 || a[0] != '[' || a[len(a)-1] != ']' {
		return netip.AddrPort{}, false
	}
	var ip [16]byte
	n := 0
	for _, c := range a[1 : len(a)-1] {
		if c == ':' {
			continue
		}
		v, ok := hexDigit(c)
		if !ok || n == 32 {
			return netip.AddrPort{}, false
		}
		ip[n/2] |= v << (4 * (1 - n%2))
		n++
	}
	if n != 32 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(netip.AddrFrom16(ip), uint16(port)), true
}

func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		d, ok := hexDigit(c)
		if !ok {
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func parseDec(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// nextField splits the first field, separated by blanks, off b.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isBlank(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }
