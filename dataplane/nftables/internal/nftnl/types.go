package nftnl

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// kind is one field of a set key or map value.
type kind uint8

const (
	kIPv4 kind = iota
	kIPv6
	kProto
	kService
	// kInteger is numgen's output: 32 bits in host order.
	kInteger
	kVerdict
)

// nft's datatype numbers (datatype.h).
const (
	dtVerdict  = 0xffffff00
	dtInteger  = 4
	dtIPv4     = 7
	dtIPv6     = 8
	dtProto    = 12
	dtService  = 13
	dtTypeBits = 6
)

var kindInfo = [...]struct {
	name string
	dt   uint32
	size int
}{
	kIPv4:    {"ipv4_addr", dtIPv4, 4},
	kIPv6:    {"ipv6_addr", dtIPv6, 16},
	kProto:   {"inet_proto", dtProto, 1},
	kService: {"inet_service", dtService, 2},
	kInteger: {"integer", dtInteger, 4},
	kVerdict: {"verdict", dtVerdict, 16},
}

// typeofField is one expression of a "typeof" declaration, with what nft
// stores of it in the set's user data.
type typeofField struct {
	text string
	kind kind
	// desc and field are nft's protocol description and template field
	// numbers of a payload expression.
	desc, field uint32
}

// The expressions "typeof" may name in the dataplane's maps.
var typeofFields = []typeofField{
	{"ip daddr", kIPv4, 12, 12},
	{"ip saddr", kIPv4, 12, 11},
	{"ip6 daddr", kIPv6, 13, 9},
	{"ip6 saddr", kIPv6, 13, 8},
	{"tcp dport", kService, 8, 2},
	{"udp dport", kService, 6, 2},
	{"sctp dport", kService, 10, 2},
}

// setType is a set's or map's key and value as nft types them.
type setType struct {
	key, data []kind
	// typeof is the declaration when the set is declared by typeof: its
	// key is then keyOf's fields (none, or payload fields) followed by
	// "numgen random mod <numgenMod>".
	typeof    bool
	numgenMod uint32
	keyOf     []typeofField
	dataOf    []typeofField
}

func (t *setType) isMap() bool { return t.data != nil }

func (t *setType) vmap() bool { return len(t.data) == 1 && t.data[0] == kVerdict }

// TypeError is returned for a set or map type nftnl cannot write.
type TypeError struct {
	Type string
}

func (e *TypeError) Error() string { return fmt.Sprintf("nftnl: unsupported set type %q", e.Type) }

// parseType reads a knftables Type ("ipv4_addr . inet_service : verdict")
// or TypeOf ("numgen random mod 1 : ip daddr . tcp dport", or with a key
// of payload fields before numgen: "ip daddr . tcp dport . numgen random
// mod 1 : ip daddr . tcp dport").
func parseType(typ, typeOf string) (*setType, error) {
	if typeOf != "" {
		return parseTypeOf(typeOf)
	}
	k, d, isMap := strings.Cut(typ, " : ")
	t := &setType{}
	var err error
	if t.key, err = kindsOf(k, typ); err != nil {
		return nil, err
	}
	if isMap {
		if t.data, err = kindsOf(d, typ); err != nil {
			return nil, err
		}
		if len(t.data) != 1 || t.data[0] != kVerdict {
			return nil, &TypeError{typ}
		}
	}
	for _, k := range t.key {
		if k == kVerdict || k == kInteger {
			return nil, &TypeError{typ}
		}
	}
	return t, nil
}

func kindsOf(s, whole string) ([]kind, error) {
	var out []kind
	for _, f := range strings.Split(s, " . ") {
		found := false
		for k, info := range kindInfo {
			if info.name == f {
				out = append(out, kind(k))
				found = true
				break
			}
		}
		if !found {
			return nil, &TypeError{whole}
		}
	}
	return out, nil
}

func parseTypeOf(s string) (*setType, error) {
	k, d, ok := strings.Cut(s, " : ")
	fields := strings.Split(k, " . ")
	mod, ok2 := strings.CutPrefix(fields[len(fields)-1], "numgen random mod ")
	if !ok || !ok2 {
		return nil, &TypeError{"typeof " + s}
	}
	n, err := strconv.ParseUint(mod, 10, 32)
	if err != nil || n == 0 {
		return nil, &TypeError{"typeof " + s}
	}
	t := &setType{typeof: true, numgenMod: uint32(n)}
	if t.keyOf, err = typeofFieldsOf(fields[:len(fields)-1], s); err != nil {
		return nil, err
	}
	if t.dataOf, err = typeofFieldsOf(strings.Split(d, " . "), s); err != nil {
		return nil, err
	}
	for _, f := range t.keyOf {
		t.key = append(t.key, f.kind)
	}
	t.key = append(t.key, kInteger)
	for _, f := range t.dataOf {
		t.data = append(t.data, f.kind)
	}
	return t, nil
}

// typeofFieldsOf looks up the payload fields of a typeof declaration.
func typeofFieldsOf(list []string, whole string) ([]typeofField, error) {
	var out []typeofField
	for _, f := range list {
		i := slicesIndexFunc(typeofFields, func(tf typeofField) bool { return tf.text == f })
		if i < 0 {
			return nil, &TypeError{"typeof " + whole}
		}
		out = append(out, typeofFields[i])
	}
	return out, nil
}

func slicesIndexFunc[T any](s []T, f func(T) bool) int {
	for i := range s {
		if f(s[i]) {
			return i
		}
	}
	return -1
}

// dtype is the kernel's datatype number of a list of fields: each field's
// number shifted in 6 bits at a time, as nft's concat_type_alloc.
func dtype(ks []kind) uint32 {
	var t uint32
	for _, k := range ks {
		t = t<<dtTypeBits | kindInfo[k].dt
	}
	return t
}

// length is the byte length of a key or value: each field of a
// concatenation padded to 4 bytes.
func length(ks []kind) int {
	if len(ks) == 1 {
		return kindInfo[ks[0]].size
	}
	n := 0
	for _, k := range ks {
		n += nlaAlign(kindInfo[k].size)
	}
	return n
}

// String is the type as knftables writes it.
func (t *setType) String() string {
	if t.typeof {
		var b strings.Builder
		for _, f := range t.keyOf {
			b.WriteString(f.text + " . ")
		}
		b.WriteString("numgen random mod " + strconv.FormatUint(uint64(t.numgenMod), 10) + " : ")
		for i, f := range t.dataOf {
			if i > 0 {
				b.WriteString(" . ")
			}
			b.WriteString(f.text)
		}
		return b.String()
	}
	s := kindsString(t.key)
	if t.data != nil {
		s += " : " + kindsString(t.data)
	}
	return s
}

func kindsString(ks []kind) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = kindInfo[k].name
	}
	return strings.Join(parts, " . ")
}

// ElementError is returned for element text that does not fit its set.
type ElementError struct {
	Set, Text string
}

func (e *ElementError) Error() string {
	return fmt.Sprintf("nftnl: element %q does not fit set %s", e.Text, e.Set)
}

// appendValue appends the bytes of the fields of text (joined by " . ")
// to b.
func appendValue(b []byte, ks []kind, text string) ([]byte, bool) {
	return appendFields(b, ks, text, len(ks) > 1)
}

// appendFields is appendValue for fields that are a concatenation's, each
// padded to 4 bytes, when concat is set: also those that are only its
// first ones.
func appendFields(b []byte, ks []kind, text string, concat bool) ([]byte, bool) {
	for i, k := range ks {
		f := text
		if i < len(ks)-1 {
			// Fields hold no space: the first one ends this one.
			j := strings.IndexByte(text, ' ')
			if j < 0 || !strings.HasPrefix(text[j:], " . ") {
				return b, false
			}
			f, text = text[:j], text[j+3:]
		}
		var ok bool
		start := len(b)
		if b, ok = appendField(b, k, f); !ok {
			return b, false
		}
		if concat {
			for (len(b)-start)%4 != 0 {
				b = append(b, 0)
			}
		}
	}
	return b, true
}

func appendField(b []byte, k kind, f string) ([]byte, bool) {
	switch k {
	case kIPv4, kIPv6:
		if k == kIPv4 {
			if a, ok := parseIPv4(f); ok {
				return append(b, a[:]...), true
			}
		}
		a, err := netip.ParseAddr(f)
		if err != nil || a.Is4() != (k == kIPv4) || a.Zone() != "" {
			return b, false
		}
		if a.Is4() {
			v := a.As4()
			return append(b, v[:]...), true
		}
		v := a.As16()
		return append(b, v[:]...), true
	case kProto:
		p, ok := protoNumber(f)
		return append(b, p), ok
	case kService:
		n, ok := parseDecimal(f, 1<<16-1)
		return binary.BigEndian.AppendUint16(b, uint16(n)), ok
	case kInteger:
		n, ok := parseDecimal(f, 1<<32-1)
		return binary.NativeEndian.AppendUint32(b, uint32(n)), ok
	}
	return b, false
}

// parseDecimal reads a decimal number up to max as strconv.ParseUint
// does in base 10, without its generality: every port of every element
// goes through it.
func parseDecimal(s string, max uint64) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
		if n > max {
			return 0, false
		}
	}
	return n, true
}

// parseIPv4 reads a dotted-quad address as netip.ParseAddr does (no
// leading zeros), without its generality; ok is false for anything else,
// which ParseAddr then judges.
func parseIPv4(s string) (a [4]byte, ok bool) {
	i := 0
	for k := range 4 {
		if k > 0 {
			if i >= len(s) || s[i] != '.' {
				return a, false
			}
			i++
		}
		n, start := 0, i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 3 {
			n = n*10 + int(s[i]-'0')
			i++
		}
		if i == start || n > 255 || i-start > 1 && s[start] == '0' {
			return a, false
		}
		a[k] = byte(n)
	}
	return a, i == len(s)
}

func protoNumber(s string) (byte, bool) {
	switch s {
	case "tcp":
		return 6, true
	case "udp":
		return 17, true
	case "sctp":
		return 132, true
	}
	n, err := strconv.ParseUint(s, 10, 8)
	return byte(n), err == nil
}

func protoName(p byte) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// valueText is appendValue backwards: the text nft prints for b.
func valueText(ks []kind, b []byte) (string, bool) {
	var out []byte
	concat := len(ks) > 1
	for i, k := range ks {
		size := kindInfo[k].size
		if len(b) < size {
			return "", false
		}
		if i > 0 {
			out = append(out, " . "...)
		}
		f := b[:size]
		switch k {
		case kIPv4:
			out = netip.AddrFrom4([4]byte(f)).AppendTo(out)
		case kIPv6:
			out = netip.AddrFrom16([16]byte(f)).AppendTo(out)
		case kProto:
			out = append(out, protoName(f[0])...)
		case kService:
			out = strconv.AppendUint(out, uint64(binary.BigEndian.Uint16(f)), 10)
		case kInteger:
			out = strconv.AppendUint(out, uint64(binary.NativeEndian.Uint32(f)), 10)
		default:
			return "", false
		}
		if concat {
			size = nlaAlign(size)
		}
		if len(b) < size {
			return "", false
		}
		b = b[size:]
	}
	return string(out), len(b) == 0
}
