package nftnl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// set writes a set or map operation.
func (b *batch) set(i int, v Verb, name, typ, typeOf string, flags []knftables.SetFlag, timeout *time.Duration, size *uint64, comment *string) error {
	switch v {
	case Flush:
		b.named(unix.NFT_MSG_DELSETELEM, i, unix.NFTA_SET_ELEM_LIST_TABLE, unix.NFTA_SET_ELEM_LIST_SET, name)
		return nil
	case Delete:
		b.named(unix.NFT_MSG_DELSET, i, unix.NFTA_SET_TABLE, unix.NFTA_SET_NAME, name)
		b.types[name] = nil
		return nil
	}
	t, err := parseType(typ, typeOf)
	if err != nil {
		return err
	}
	var f uint32
	if t.isMap() {
		f |= setMap
	}
	for _, fl := range flags {
		switch fl {
		case knftables.ConstantFlag:
			f |= setConstant
		case knftables.IntervalFlag:
			f |= setInterval
		case knftables.TimeoutFlag:
			f |= setTimeout
		case knftables.DynamicFlag:
			f |= setEval
		default:
			return fmt.Errorf("unsupported set flag %q", fl)
		}
	}
	if f&setInterval != 0 {
		return errors.New("named interval sets are not supported")
	}
	b.types[name] = t
	b.c.setID++
	b.ids[name] = b.c.setID
	at := b.begin(nftType(unix.NFT_MSG_NEWSET), unix.NLM_F_CREATE, i)
	b.w.str(unix.NFTA_SET_TABLE, b.c.table)
	b.w.str(unix.NFTA_SET_NAME, name)
	b.w.u32(unix.NFTA_SET_FLAGS, f)
	b.w.u32(unix.NFTA_SET_KEY_TYPE, dtype(t.key))
	b.w.u32(unix.NFTA_SET_KEY_LEN, uint32(length(t.key)))
	if t.isMap() {
		if t.vmap() {
			b.w.u32(unix.NFTA_SET_DATA_TYPE, dtVerdict)
			b.w.u32(unix.NFTA_SET_DATA_LEN, 0)
		} else {
			b.w.u32(unix.NFTA_SET_DATA_TYPE, dtype(t.data))
			b.w.u32(unix.NFTA_SET_DATA_LEN, uint32(length(t.data)))
		}
	}
	b.w.u32(unix.NFTA_SET_ID, b.c.setID)
	if timeout != nil {
		b.w.u64(unix.NFTA_SET_TIMEOUT, uint64(timeout.Milliseconds()))
	}
	if size != nil {
		d := b.w.nest(unix.NFTA_SET_DESC)
		b.w.u32(unix.NFTA_SET_DESC_SIZE, uint32(*size))
		_ = b.w.end(d)
	}
	c := ""
	if comment != nil {
		c = *comment
	}
	b.w.attr(unix.NFTA_SET_USERDATA, setUdata(t, c))
	finish(b.w.b, at)
	return nil
}

// typeOf is the type of set name: defined in this transaction, known to
// the Conn, or read from the kernel.
func (b *batch) typeOf(ctx context.Context, name string) (*setType, error) {
	if t, ok := b.types[name]; ok {
		if t == nil {
			return nil, fmt.Errorf("set %s is deleted earlier in the transaction", name)
		}
		return t, nil
	}
	if t := b.c.types[name]; t != nil && !b.tableDeleted {
		return t, nil
	}
	s, err := b.c.getSet(ctx, name)
	if err != nil {
		return nil, err
	}
	b.c.types[name] = s.typ
	return s.typ, nil
}

// element adds an element to the open element message, or opens one.
func (b *batch) element(ctx context.Context, i int, v Verb, e *knftables.Element) error {
	if v == Flush {
		return errVerb
	}
	name := e.Set
	if name == "" {
		name = e.Map
	}
	t, err := b.typeOf(ctx, name)
	if err != nil {
		return err
	}
	n := b.elemStart(i, 0, v, name)
	k := b.w.nest(unix.NFTA_SET_ELEM_KEY)
	d := b.w.start(unix.NFTA_DATA_VALUE)
	var ok bool
	if b.w.b, ok = appendValue(b.w.b, t.key, strings.Join(e.Key, " . ")); !ok {
		return &ElementError{Set: name, Text: strings.Join(e.Key, " . ")}
	}
	_ = b.w.end(d)
	_ = b.w.end(k)
	if v == Add && t.isMap() {
		if err := b.elemValue(t, name, strings.Join(e.Value, " . ")); err != nil {
			return err
		}
	}
	if v == Add && e.Comment != nil {
		b.w.udataStr(unix.NFTA_SET_ELEM_USERDATA, udElemComment, *e.Comment)
	}
	return b.w.end(n)
}

// elements adds the elements of op i, e, as element does one each.
func (b *batch) elements(ctx context.Context, i int, v Verb, e *Elements) error {
	if v == Flush {
		return errVerb
	}
	t, err := b.typeOf(ctx, e.Set)
	if err != nil {
		return err
	}
	prefix, err := numberedPrefix(t, e)
	if err != nil {
		return err
	}
	for j := range e.Len() {
		n := b.elemStart(i, j, v, e.Set)
		k := b.w.nest(unix.NFTA_SET_ELEM_KEY)
		d := b.w.start(unix.NFTA_DATA_VALUE)
		if e.Keys == nil {
			b.w.b = binary.NativeEndian.AppendUint32(append(b.w.b, prefix...), e.First+uint32(j))
		} else {
			var ok bool
			if b.w.b, ok = appendValue(b.w.b, t.key, e.Keys[j]); !ok {
				return &ElementError{Set: e.Set, Text: e.Keys[j]}
			}
		}
		_ = b.w.end(d)
		_ = b.w.end(k)
		if v == Add && t.isMap() {
			val := ""
			if j < len(e.Values) {
				val = e.Values[j]
			}
			if err := b.elemValue(t, e.Set, val); err != nil {
				return err
			}
		}
		if v == Add && j < len(e.Comments) && e.Comments[j] != "" {
			if len(e.Comments[j]) > maxComment {
				return fmt.Errorf("comment longer than nft's %d bytes", maxComment)
			}
			b.w.udataStr(unix.NFTA_SET_ELEM_USERDATA, udElemComment, e.Comments[j])
		}
		if err := b.w.end(n); err != nil {
			return err
		}
	}
	return nil
}

// numberedPrefix is the encoded fields before the number of e's keys,
// when they are numbered (Keys nil): none for a key that is a number
// alone, Prefix's for a concatenation that ends in one.
func numberedPrefix(t *setType, e *Elements) ([]byte, error) {
	if e.Keys != nil {
		return nil, nil
	}
	last := len(t.key) - 1
	if last < 0 || t.key[last] != kInteger || (last == 0) != (e.Prefix == "") {
		return nil, &ElementError{Set: e.Set, Text: "a numbered key"}
	}
	if last == 0 {
		return nil, nil
	}
	prefix, ok := appendFields(nil, t.key[:last], e.Prefix, true)
	if !ok {
		return nil, &ElementError{Set: e.Set, Text: e.Prefix}
	}
	return prefix, nil
}

// elemStart opens the list entry of an element of set, element j of op
// i, in the open element message or in a new one, and returns it for
// end.
func (b *batch) elemStart(i, j int, v Verb, set string) int {
	if o := b.open; o == nil || o.verb != v || o.set != set || len(b.w.b)-o.nested > maxElemBytes {
		b.closeElems()
		typ := nftType(unix.NFT_MSG_NEWSETELEM)
		flags := uint16(unix.NLM_F_CREATE)
		if v == Delete {
			typ, flags = nftType(unix.NFT_MSG_DELSETELEM), 0
		}
		at := b.begin(typ, flags, i)
		b.w.str(unix.NFTA_SET_ELEM_LIST_TABLE, b.c.table)
		b.w.str(unix.NFTA_SET_ELEM_LIST_SET, set)
		if id, ok := b.ids[set]; ok {
			b.w.u32(unix.NFTA_SET_ELEM_LIST_SET_ID, id)
		}
		b.open = &elemMsg{verb: v, set: set, at: at, info: len(b.msgs) - 1}
		b.open.list = b.w.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS)
		b.open.nested = len(b.w.b)
		m := &b.msgs[b.open.info]
		m.count, m.from, m.elems = 0, int32(j), true
	}
	m := &b.msgs[b.open.info]
	m.count++
	// libnftnl numbers the elements of a list from 1.
	return b.w.nest(uint16(m.count))
}

func (b *batch) elemValue(t *setType, set string, text string) error {
	if t.vmap() {
		v, ok := parseVerdict(text)
		if !ok {
			return &ElementError{Set: set, Text: text}
		}
		b.verdictData(v)
		return nil
	}
	d := b.w.nest(unix.NFTA_SET_ELEM_DATA)
	dv := b.w.start(unix.NFTA_DATA_VALUE)
	var ok bool
	if b.w.b, ok = appendValue(b.w.b, t.data, text); !ok {
		return &ElementError{Set: set, Text: text}
	}
	_ = b.w.end(dv)
	return b.w.end(d)
}

// parseVerdict reads "drop", "accept", "jump CHAIN" or "goto CHAIN".
func parseVerdict(s string) (expr.Verdict, bool) {
	switch s {
	case "drop":
		return expr.Verdict{Kind: expr.VerdictDrop}, true
	case "accept":
		return expr.Verdict{Kind: expr.VerdictAccept}, true
	}
	verb, chain, ok := strings.Cut(s, " ")
	if !ok || chain == "" || strings.ContainsAny(chain, " {}\"@,") {
		return expr.Verdict{}, false
	}
	switch verb {
	case "goto":
		return expr.Verdict{Kind: expr.VerdictGoto, Chain: chain}, true
	case "jump":
		return expr.Verdict{Kind: expr.VerdictJump, Chain: chain}, true
	}
	return expr.Verdict{}, false
}

// closeElems finishes the open element message.
func (b *batch) closeElems() {
	if b.open == nil {
		return
	}
	_ = b.w.end(b.open.list)
	finish(b.w.b, b.open.at)
	b.open = nil
}

func hookNumber(h knftables.BaseChainHook) (uint32, bool) {
	switch h {
	case knftables.PreroutingHook:
		return unix.NF_INET_PRE_ROUTING, true
	case knftables.InputHook:
		return unix.NF_INET_LOCAL_IN, true
	case knftables.ForwardHook:
		return unix.NF_INET_FORWARD, true
	case knftables.OutputHook:
		return unix.NF_INET_LOCAL_OUT, true
	case knftables.PostroutingHook:
		return unix.NF_INET_POST_ROUTING, true
	}
	return 0, false
}

// priorityNumber reads a priority as knftables writes it: a number, or a
// name of the ip families ("dstnat") optionally followed by +N or -N.
func priorityNumber(p knftables.BaseChainPriority) (int32, bool) {
	s := strings.ReplaceAll(string(p), " ", "")
	if n, err := strconv.ParseInt(s, 10, 32); err == nil {
		return int32(n), true
	}
	name, off := s, int64(0)
	if i := strings.IndexAny(s, "+-"); i > 0 {
		n, err := strconv.ParseInt(s[i:], 10, 32)
		if err != nil {
			return 0, false
		}
		name, off = s[:i], n
	}
	base, ok := map[string]int64{"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100}[name]
	return int32(base + off), ok
}
