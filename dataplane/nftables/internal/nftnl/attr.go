package nftnl

import (
	"encoding/binary"
	"errors"
)

// buf builds netlink messages by appending, so that a batch of a million
// elements is encoded into one growing slice with no per-attribute
// allocation.
type buf struct {
	b []byte
}

// nlaAlign rounds n up to netlink's 4-byte attribute alignment.
func nlaAlign(n int) int { return (n + 3) &^ 3 }

// attr appends an attribute holding data.
func (w *buf) attr(typ uint16, data []byte) {
	n := 4 + len(data)
	w.b = binary.NativeEndian.AppendUint16(w.b, uint16(n))
	w.b = binary.NativeEndian.AppendUint16(w.b, typ)
	w.b = append(w.b, data...)
	w.pad()
}

func (w *buf) pad() {
	for len(w.b)%4 != 0 {
		w.b = append(w.b, 0)
	}
}

// str appends a NUL-terminated string attribute.
func (w *buf) str(typ uint16, s string) {
	n := 4 + len(s) + 1
	w.b = binary.NativeEndian.AppendUint16(w.b, uint16(n))
	w.b = binary.NativeEndian.AppendUint16(w.b, typ)
	w.b = append(w.b, s...)
	w.b = append(w.b, 0)
	w.pad()
}

// u32 appends a big-endian 32-bit attribute, as nf_tables wants numbers.
func (w *buf) u32(typ uint16, v uint32) {
	w.b = binary.NativeEndian.AppendUint16(w.b, 8)
	w.b = binary.NativeEndian.AppendUint16(w.b, typ)
	w.b = binary.BigEndian.AppendUint32(w.b, v)
}

// u64 appends a big-endian 64-bit attribute.
func (w *buf) u64(typ uint16, v uint64) {
	w.b = binary.NativeEndian.AppendUint16(w.b, 12)
	w.b = binary.NativeEndian.AppendUint16(w.b, typ)
	w.b = binary.BigEndian.AppendUint64(w.b, v)
}

// nest opens a nested attribute; end closes it.
func (w *buf) nest(typ uint16) int { return w.start(typ | nlaFNested) }

// udataStr appends an attribute holding one udata string (a comment),
// written in place: thousands of elements carry one.
func (w *buf) udataStr(typ uint16, udType byte, s string) {
	at := w.start(typ)
	w.b = udataString(w.b, udType, s)
	_ = w.end(at) // a comment is at most maxComment bytes
}

// start opens an attribute whose value is appended next; end closes it.
func (w *buf) start(typ uint16) int {
	at := len(w.b)
	w.b = append(w.b, 0, 0, 0, 0)
	binary.NativeEndian.PutUint16(w.b[at+2:], typ)
	return at
}

// errAttrTooLong is returned when a nested attribute would overflow the
// 16-bit length netlink gives it.
var errAttrTooLong = errors.New("netlink attribute longer than 65535 bytes")

func (w *buf) end(at int) error {
	n := len(w.b) - at
	if n > 0xffff {
		return errAttrTooLong
	}
	binary.NativeEndian.PutUint16(w.b[at:], uint16(n))
	w.pad()
	return nil
}

const nlaFNested = 0x8000

// attrs iterates over the attributes of b.
type attrs struct {
	b   []byte
	typ uint16
	val []byte
	err error
}

func (a *attrs) next() bool {
	if len(a.b) < 4 {
		if len(a.b) != 0 {
			a.err = errShort
		}
		return false
	}
	n := int(binary.NativeEndian.Uint16(a.b))
	if n < 4 || n > len(a.b) {
		a.err = errShort
		return false
	}
	a.typ = binary.NativeEndian.Uint16(a.b[2:]) &^ (nlaFNested | 0x4000)
	a.val = a.b[4:n]
	if nlaAlign(n) >= len(a.b) {
		a.b = nil
	} else {
		a.b = a.b[nlaAlign(n):]
	}
	return true
}

func (a *attrs) u32() uint32 {
	if len(a.val) < 4 {
		a.err = errShort
		return 0
	}
	return binary.BigEndian.Uint32(a.val)
}

func (a *attrs) u64() uint64 {
	if len(a.val) < 8 {
		a.err = errShort
		return 0
	}
	return binary.BigEndian.Uint64(a.val)
}

func (a *attrs) str() string {
	v := a.val
	if n := len(v); n > 0 && v[n-1] == 0 {
		v = v[:n-1]
	}
	return string(v)
}

var errShort = errors.New("truncated netlink attribute")

// udata are nftables' user data: type, length, value, one byte each of
// type and length.
func udataAppend(b []byte, typ byte, v []byte) []byte {
	b = append(b, typ, byte(len(v)))
	return append(b, v...)
}

func udataString(b []byte, typ byte, s string) []byte {
	b = append(b, typ, byte(len(s)+1))
	b = append(b, s...)
	return append(b, 0)
}

func udataU32(b []byte, typ byte, v uint32) []byte {
	b = append(b, typ, 4)
	return binary.NativeEndian.AppendUint32(b, v)
}

// udataGet returns the value of the first udata of type typ.
func udataGet(b []byte, typ byte) ([]byte, bool) {
	for len(b) >= 2 {
		t, n := b[0], int(b[1])
		if 2+n > len(b) {
			return nil, false
		}
		if t == typ {
			return b[2 : 2+n], true
		}
		b = b[2+n:]
	}
	return nil, false
}

func udataStringOf(b []byte, typ byte) (string, bool) {
	v, ok := udataGet(b, typ)
	if !ok {
		return "", false
	}
	if n := len(v); n > 0 && v[n-1] == 0 {
		v = v[:n-1]
	}
	return string(v), true
}
