package nftnl

import (
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// anon writes the anonymous set or map of a rule about to be written,
// as nft does: the set, then its elements, and the lookup names its ID.
func (b *batch) anon(i int, c *Compiled) {
	b.c.setID++
	id := b.c.setID
	a := c.Anon
	for _, e := range c.Exprs {
		if l, ok := e.(*expr.Lookup); ok {
			l.SetID = id
		}
	}
	name := "__set%d"
	flags := uint32(setAnonymous | setConstant | setInterval)
	keyType, keyLen := uint32(dtIPv4), 4
	ud := anonIntervalUdata(a.field)
	if a.field.kind == kIPv6 {
		keyType, keyLen = dtIPv6, 16
	}
	if a.isMap {
		name, flags = "__map%d", setAnonymous|setConstant|setMap
		keyType, keyLen, ud = dtInteger, 4, anonMapUdata()
	}
	at := b.begin(nftType(unix.NFT_MSG_NEWSET), unix.NLM_F_CREATE, i)
	b.w.str(unix.NFTA_SET_TABLE, b.c.table)
	b.w.str(unix.NFTA_SET_NAME, name)
	b.w.u32(unix.NFTA_SET_FLAGS, flags)
	b.w.u32(unix.NFTA_SET_KEY_TYPE, keyType)
	b.w.u32(unix.NFTA_SET_KEY_LEN, uint32(keyLen))
	if a.isMap {
		b.w.u32(unix.NFTA_SET_DATA_TYPE, dtVerdict)
		b.w.u32(unix.NFTA_SET_DATA_LEN, 0)
	}
	b.w.u32(unix.NFTA_SET_ID, id)
	d := b.w.nest(unix.NFTA_SET_DESC)
	b.w.u32(unix.NFTA_SET_DESC_SIZE, uint32(len(a.elems)))
	_ = b.w.end(d)
	b.w.attr(unix.NFTA_SET_USERDATA, ud)
	finish(b.w.b, at)

	// Elements go in messages of up to maxElemBytes, as named sets'.
	list, j := -1, 0
	for _, e := range a.elems {
		if list < 0 || len(b.w.b)-list > maxElemBytes {
			if list >= 0 {
				_ = b.w.end(list)
				finish(b.w.b, at)
			}
			at = b.begin(nftType(unix.NFT_MSG_NEWSETELEM), unix.NLM_F_CREATE, i)
			b.w.str(unix.NFTA_SET_ELEM_LIST_TABLE, b.c.table)
			b.w.str(unix.NFTA_SET_ELEM_LIST_SET, name)
			b.w.u32(unix.NFTA_SET_ELEM_LIST_SET_ID, id)
			list, j = b.w.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS), 0
		}
		// libnftnl numbers the elements of a list from 1.
		j++
		n := b.w.nest(uint16(j))
		if e.end {
			b.w.u32(unix.NFTA_SET_ELEM_FLAGS, unix.NFT_SET_ELEM_INTERVAL_END)
		}
		k := b.w.nest(unix.NFTA_SET_ELEM_KEY)
		b.w.attr(unix.NFTA_DATA_VALUE, e.key)
		_ = b.w.end(k)
		if e.verdict != nil {
			b.verdictData(*e.verdict)
		}
		_ = b.w.end(n)
	}
	_ = b.w.end(list)
	finish(b.w.b, at)
}
