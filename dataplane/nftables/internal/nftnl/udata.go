package nftnl

import (
	"encoding/binary"
	"strings"
)

// Set user data as nft 1.0.6 writes it (libnftnl's NFTNL_UDATA_SET_*):
// nft reads it back to print a set's type, so a set written without it
// would list differently from one nft made.
const (
	udSetKeyByteOrder  = 0
	udSetDataByteOrder = 1
	udSetMergeElements = 2
	udSetKeyTypeof     = 3
	udSetDataTypeof    = 4
	udSetDataInterval  = 6
	udSetComment       = 7

	udTableComment = 0
	udRuleComment  = 0
	udElemComment  = 0
)

// nft's byte orders.
const (
	byteOrderInvalid = 0
	byteOrderHost    = 1
	byteOrderBig     = 2
)

// nft's expression numbers in "typeof" user data (enum expr_types).
const (
	exprTypeVerdict = 1
	exprTypePayload = 7
	exprTypeConcat  = 13
	exprTypeNumgen  = 23
)

func byteOrder(k kind) uint32 {
	switch k {
	case kIPv4, kIPv6, kService:
		return byteOrderBig
	case kInteger:
		return byteOrderHost
	}
	return byteOrderInvalid
}

// typeofUdata appends one typeof expression: its type, then its data.
func typeofUdata(b []byte, exprType uint32, data []byte) []byte {
	b = udataU32(b, 0, exprType)
	return udataAppend(b, 1, data)
}

func payloadUdata(b []byte, f typeofField) []byte {
	var d []byte
	d = udataU32(d, 0, f.desc)
	d = udataU32(d, 1, f.field)
	return typeofUdata(b, exprTypePayload, d)
}

// setUdata is the user data nft writes for a named set or map of type t.
func setUdata(t *setType, comment string) []byte {
	var b []byte
	concat := len(t.key) > 1
	if concat {
		b = udataU32(b, udSetKeyByteOrder, byteOrderInvalid)
	} else {
		b = udataU32(b, udSetKeyByteOrder, byteOrder(t.key[0]))
	}
	if t.isMap() {
		b = udataU32(b, udSetDataByteOrder, byteOrderInvalid)
	}
	switch {
	case t.typeof:
		var d []byte
		d = udataU32(d, 0, 1) // random
		d = udataU32(d, 1, t.numgenMod)
		d = udataU32(d, 2, 0)
		ng := typeofUdata(nil, exprTypeNumgen, d)
		if len(t.keyOf) == 0 {
			b = udataAppend(b, udSetKeyTypeof, ng)
		} else {
			var elems []byte
			for i, f := range t.keyOf {
				elems = udataAppend(elems, byte(i), payloadUdata(nil, f))
			}
			elems = udataAppend(elems, byte(len(t.keyOf)), ng)
			b = udataAppend(b, udSetKeyTypeof, typeofUdata(nil, exprTypeConcat, elems))
		}
		var elems []byte
		for i, f := range t.dataOf {
			elems = udataAppend(elems, byte(i), payloadUdata(nil, f))
		}
		b = udataAppend(b, udSetDataTypeof, typeofUdata(nil, exprTypeConcat, elems))
	case concat:
		b = udataAppend(b, udSetKeyTypeof, typeofUdata(nil, exprTypeConcat, nil))
	}
	if t.isMap() {
		b = udataU32(b, udSetDataInterval, 0)
	}
	if comment != "" {
		b = udataString(b, udSetComment, comment)
	}
	return b
}

// anonMapUdata is the user data of numgen's anonymous verdict map.
func anonMapUdata() []byte {
	var b []byte
	b = udataU32(b, udSetKeyByteOrder, byteOrderHost)
	b = udataU32(b, udSetDataByteOrder, byteOrderInvalid)
	b = udataAppend(b, udSetDataTypeof, typeofUdata(nil, exprTypeVerdict, nil))
	return udataU32(b, udSetDataInterval, 0)
}

// anonIntervalUdata is the user data of an anonymous set of addresses
// matched by a payload field.
func anonIntervalUdata(f typeofField) []byte {
	var b []byte
	b = udataU32(b, udSetKeyByteOrder, byteOrderBig)
	b = udataU32(b, udSetMergeElements, 1)
	return udataAppend(b, udSetKeyTypeof, payloadUdata(nil, f))
}

// typeFromUdata reads back what setUdata wrote: the typeof declaration
// ("" for a set declared by type) and the comment.
func typeFromUdata(ud []byte) (typeOf string, comment string, ok bool) {
	comment, _ = udataStringOf(ud, udSetComment)
	key, hasKey := udataGet(ud, udSetKeyTypeof)
	data, hasData := udataGet(ud, udSetDataTypeof)
	if !hasKey || !hasData {
		return "", comment, true
	}
	kt, kd, ok1 := typeofExpr(key)
	dt, dd, ok2 := typeofExpr(data)
	if !ok1 || !ok2 || dt != exprTypeConcat {
		return "", comment, false
	}
	var keyParts []string
	if kt == exprTypeConcat {
		// Payload fields, then numgen.
		parts, last, ok := concatUdata(kd)
		if !ok || last == nil {
			return "", comment, false
		}
		keyParts = parts
		kt, kd, ok1 = typeofExpr(last)
		if !ok1 {
			return "", comment, false
		}
	}
	if kt != exprTypeNumgen {
		return "", comment, false
	}
	mod, ok3 := udataGet(kd, 1)
	if !ok3 || len(mod) != 4 {
		return "", comment, false
	}
	parts, last, ok := concatUdata(dd)
	if !ok || last != nil {
		return "", comment, false
	}
	keyParts = append(keyParts, "numgen random mod "+uitoa(binary.NativeEndian.Uint32(mod)))
	return strings.Join(keyParts, " . ") + " : " + strings.Join(parts, " . "), comment, true
}

// concatUdata reads the payload fields of a concatenation's user data;
// last is the element after them that is not a payload (nil when all
// are), which must be the last.
func concatUdata(b []byte) (parts []string, last []byte, ok bool) {
	for i := 0; ; i++ {
		e, ok := udataGet(b, byte(i))
		if !ok {
			return parts, last, true
		}
		if last != nil {
			return nil, nil, false
		}
		et, ed, ok := typeofExpr(e)
		if ok && et != exprTypePayload {
			last = e
			continue
		}
		desc, ok1 := udataGet(ed, 0)
		field, ok2 := udataGet(ed, 1)
		if !ok || !ok1 || !ok2 || len(desc) != 4 || len(field) != 4 {
			return nil, nil, false
		}
		j := slicesIndexFunc(typeofFields, func(f typeofField) bool {
			return f.desc == binary.NativeEndian.Uint32(desc) && f.field == binary.NativeEndian.Uint32(field)
		})
		if j < 0 {
			return nil, nil, false
		}
		parts = append(parts, typeofFields[j].text)
	}
}

func typeofExpr(b []byte) (uint32, []byte, bool) {
	t, ok1 := udataGet(b, 0)
	d, ok2 := udataGet(b, 1)
	if !ok1 || !ok2 || len(t) != 4 {
		return 0, nil, false
	}
	return binary.NativeEndian.Uint32(t), d, true
}
