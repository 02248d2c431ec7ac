package nftnl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// maxElemBytes caps the encoded elements of one message: their list is
// one attribute, whose length netlink holds in 16 bits.
const maxElemBytes = 60 << 10

// batch is a transaction being encoded.
type batch struct {
	c   *Conn
	w   buf
	seq uint32
	// msgs describe the messages by sequence number, from firstSeq.
	firstSeq uint32
	msgs     []msgInfo
	// types are the set types the transaction defines, committed to
	// c.types when it succeeds.
	types map[string]*setType
	// tableDeleted is set when the transaction deletes the table, and
	// with it every set.
	tableDeleted bool
	// ids are the IDs of the sets the transaction defines: nft names a
	// set by its ID as well as by its name in the messages that use it.
	ids map[string]uint32
	// open is the element message being filled, nil when none.
	open *elemMsg
	// order is the order ops are encoded in (nil: theirs), pos the
	// position in it of the op being encoded.
	order []int
	pos   int
	// dnat holds the expressions of the last endpoint-map rule.
	dnat dnatMap
	// detached is set on a part of the batch encoded on a goroutine of
	// its own (see encodeOps).
	detached bool
}

// msgInfo says which ops a message carries, for naming the one the kernel
// refused: count of them from ops[first], which is at position pos of the
// encoding order; for an element message (elems), count elements from
// element from of that op (0 but for Elements). start is the message's
// offset in the batch. A cold sync writes tens of thousands.
type msgInfo struct {
	first, pos, from, count, start int32
	elems                          bool
}

// elemMsg is an element message still taking elements.
type elemMsg struct {
	verb             Verb
	set              string
	at, list, nested int
	info             int
}

// Run runs ops as one nftables transaction: one netlink batch, which the
// kernel commits whole or not at all. On error nothing changed (the batch
// was aborted), the socket is replaced, and the error is an *OpError
// naming the refused operation when the kernel refused one.
//
// Only errors are answered (no acknowledgements are asked for), so a
// batch of a million elements gets no million replies; a generation
// request sent after the batch marks where its replies end. A lost reply
// (ENOBUFS) can only be an error's, so it means the batch was refused.
func (c *Conn) Run(ctx context.Context, ops []Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.ready(); err != nil {
		return err
	}
	c.isCommitted = false
	start := time.Now()
	b := c.newBatch()
	if err := b.encode(ctx, ops); err != nil {
		return err
	}
	encoded := time.Now()
	c.deadline(ctx)
	if err := c.send(b.w.b); err != nil {
		c.reset()
		return err
	}
	sent := time.Now()
	var refused []reply
	gen, err := c.generation(func(r reply) { refused = append(refused, r) })
	c.opts.Logger.V(4).Info("nftables transaction", "operations", len(ops), "messages", len(b.msgs), "bytes", len(b.w.b),
		"encode", encoded.Sub(start), "kernel", sent.Sub(encoded), "replies", time.Since(sent))
	if len(refused) == 0 && err == nil {
		b.commit()
		c.committed, c.isCommitted = gen, true
		return nil
	}
	c.reset()
	if len(refused) == 0 {
		return fmt.Errorf("nftnl: transaction of %d operations: %w", len(ops), err)
	}
	oe := b.describe(ops, refused)
	c.opts.Logger.Info("nftables transaction refused", "error", oe.Error())
	return oe
}

func (c *Conn) newBatch() *batch {
	return &batch{c: c, types: map[string]*setType{}, ids: map[string]uint32{}}
}

// commit records, once the kernel committed the batch, the set types it
// defined and deleted.
func (b *batch) commit() {
	if b.tableDeleted {
		clear(b.c.types)
	}
	for n, t := range b.types {
		if t == nil {
			delete(b.c.types, n)
		} else {
			b.c.types[n] = t
		}
	}
}

// encodeRange encodes the ops at positions from to to of the encoding
// order.
func (b *batch) encodeRange(ctx context.Context, ops []Op, from, to int) error {
	for k := from; k < to; k++ {
		i := b.index(k)
		op := ops[i]
		b.pos = k
		if err := b.op(ctx, i, op); err != nil {
			var text string
			if op.Obj != nil {
				text = opText(b.c.family, b.c.table, op)
			} else {
				text = fmt.Sprintf("%d elements of map %s", op.Count(), setOf(op))
			}
			return fmt.Errorf("nftnl: %s: %w", text, err)
		}
	}
	return nil
}

// index is the op at position k of the encoding order.
func (b *batch) index(k int) int {
	if b.order != nil {
		return b.order[k]
	}
	return k
}

func (b *batch) begin(typ uint16, flags uint16, op int) int {
	b.closeElems()
	// A part encoded beside the batch numbers its messages when it is
	// joined to it.
	var seq uint32
	if !b.detached {
		seq = b.c.nextSeq()
		if b.firstSeq == 0 {
			b.firstSeq = seq
		}
	}
	var at int
	b.w.b, at = msgHeader(b.w.b, typ, unix.NLM_F_REQUEST|flags, seq, b.c.fam, 0)
	b.msgs = append(b.msgs, msgInfo{first: int32(op), pos: int32(b.pos), count: 1, start: int32(at)})
	return at
}

// setIDOf gives a lookup or dynset in a set the transaction defines the
// set's ID.
func (b *batch) setIDOf(e expr.Any) {
	switch e := e.(type) {
	case *expr.Lookup:
		if id, ok := b.ids[e.SetName]; ok {
			e.SetID = id
		}
	case *expr.Dynset:
		if id, ok := b.ids[e.SetName]; ok {
			e.SetID = id
		}
	}
}

// named writes a message of the table and, when nameAttr is not 0, an
// object's name: flushes and deletes.
func (b *batch) named(msg, i int, tableAttr, nameAttr uint16, name string) {
	at := b.begin(nftType(msg), 0, i)
	b.w.str(tableAttr, b.c.table)
	if nameAttr != 0 {
		b.w.str(nameAttr, name)
	}
	finish(b.w.b, at)
}

// encode writes the batch: begin, the ops' messages, end.
func (b *batch) encode(ctx context.Context, ops []Op) error {
	size, msgs := batchSize(ops, b.c.fam == unix.NFPROTO_IPV6)
	b.w.b = make([]byte, 0, size)
	b.msgs = make([]msgInfo, 0, msgs)
	var at int
	b.w.b, at = msgHeader(b.w.b, unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, b.c.nextSeq(), unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	finish(b.w.b, at)
	b.order = elementOrder(ops)
	if err := b.encodeOps(ctx, ops); err != nil {
		return err
	}
	b.closeElems()
	b.w.b, at = msgHeader(b.w.b, unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST, b.c.nextSeq(), unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	finish(b.w.b, at)
	return nil
}

// elementOrder is the order ops are encoded in: theirs, except that each
// run of element operations of one verb is grouped by set (stably, so
// that the operations of one set keep their order). Element additions to
// different sets commute, as do deletions, and grouping puts thousands of
// elements in a message instead of one: the kernel looks a message's set
// up by name among all the table's sets. It is nil when that is ops'
// own order, as the dataplane's plans are.
func elementOrder(ops []Op) []int {
	var idx []int
	elem := func(i int) bool { return isElements(ops[i]) }
	for i := 0; i < len(ops); {
		ok := elem(i)
		j := i + 1
		for ok && j < len(ops) {
			if !elem(j) || ops[j].Verb != ops[i].Verb {
				break
			}
			j++
		}
		if ok && j-i > 1 && !grouped(ops[i:j]) {
			if idx == nil {
				idx = make([]int, len(ops))
				for k := range idx {
					idx[k] = k
				}
			}
			groupBySet(ops, idx[i:j])
		}
		i = j
	}
	return idx
}

// grouped reports whether the element operations ops hold each set's
// elements together.
func grouped(ops []Op) bool {
	var seen map[string]bool
	last := setOf(ops[0])
	for _, op := range ops[1:] {
		s := setOf(op)
		if s == last {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[last] = true
		if seen[s] {
			return false
		}
		last = s
	}
	return true
}

// groupBySet reorders idx by set, each set's in their order, the sets in
// order of first appearance.
func groupBySet(ops []Op, idx []int) {
	pos := map[string]int{}
	var groups [][]int
	for _, i := range idx {
		s := setOf(ops[i])
		g, ok := pos[s]
		if !ok {
			g = len(groups)
			pos[s] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	k := 0
	for _, g := range groups {
		k += copy(idx[k:], g)
	}
}

func setOf(op Op) string {
	if op.Obj == nil && op.Elems != nil {
		return op.Elems.Set
	}
	e, _ := op.Obj.(*knftables.Element)
	if e == nil {
		return ""
	}
	if e.Set != "" {
		return e.Set
	}
	return e.Map
}

var errVerb = errors.New("unsupported operation for this object")

// maxComment is nft's limit on a comment (NFTNL_UDATA_COMMENT_MAXLEN).
const maxComment = 128

// comment is an object's comment, nil when it has none.
func comment(o knftables.Object) *string {
	switch o := o.(type) {
	case *knftables.Table:
		return o.Comment
	case *knftables.Chain:
		return o.Comment
	case *knftables.Rule:
		return o.Comment
	case *knftables.Set:
		return o.Comment
	case *knftables.Map:
		return o.Comment
	case *knftables.Element:
		return o.Comment
	}
	return nil
}

func (b *batch) op(ctx context.Context, i int, op Op) error {
	if op.Obj == nil && op.Elems != nil {
		return b.elements(ctx, i, op.Verb, op.Elems)
	}
	if c := comment(op.Obj); c != nil && len(*c) > maxComment {
		return fmt.Errorf("comment longer than nft's %d bytes", maxComment)
	}
	switch o := op.Obj.(type) {
	case *knftables.Table:
		return b.table(i, op.Verb, o)
	case *knftables.Chain:
		return b.chain(i, op.Verb, o)
	case *knftables.Rule:
		return b.rule(i, op.Verb, o)
	case *knftables.Set:
		return b.set(i, op.Verb, o.Name, o.Type, o.TypeOf, o.Flags, o.Timeout, o.Size, o.Comment)
	case *knftables.Map:
		return b.set(i, op.Verb, o.Name, o.Type, o.TypeOf, o.Flags, o.Timeout, o.Size, o.Comment)
	case *knftables.Element:
		return b.element(ctx, i, op.Verb, o)
	}
	return fmt.Errorf("%w: %T", errVerb, op.Obj)
}

func (b *batch) table(i int, v Verb, t *knftables.Table) error {
	switch v {
	case Add:
		at := b.begin(nftType(unix.NFT_MSG_NEWTABLE), unix.NLM_F_CREATE, i)
		b.w.str(unix.NFTA_TABLE_NAME, b.c.table)
		b.w.u32(unix.NFTA_TABLE_FLAGS, 0)
		if t.Comment != nil {
			b.w.udataStr(nftaTableUserdata, udTableComment, *t.Comment)
		}
		finish(b.w.b, at)
	case Flush:
		b.named(unix.NFT_MSG_DELRULE, i, unix.NFTA_RULE_TABLE, 0, "")
	case Delete:
		// The sets defined so far go with the table.
		b.tableDeleted, b.types = true, map[string]*setType{}
		at := b.begin(nftType(unix.NFT_MSG_DELTABLE), 0, i)
		b.w.str(unix.NFTA_TABLE_NAME, b.c.table)
		finish(b.w.b, at)
	}
	return nil
}

// Attributes x/sys/unix does not name.
const (
	nftaTableUserdata = 6
	nftaChainUserdata = 12
)

func (b *batch) chain(i int, v Verb, ch *knftables.Chain) error {
	switch v {
	case Add:
		at := b.begin(nftType(unix.NFT_MSG_NEWCHAIN), unix.NLM_F_CREATE, i)
		b.w.str(unix.NFTA_CHAIN_TABLE, b.c.table)
		b.w.str(unix.NFTA_CHAIN_NAME, ch.Name)
		if ch.Type != nil || ch.Hook != nil {
			if ch.Type == nil || ch.Hook == nil || ch.Priority == nil {
				return errors.New("a base chain needs type, hook and priority")
			}
			hook, ok := hookNumber(*ch.Hook)
			prio, ok2 := priorityNumber(*ch.Priority)
			if !ok || !ok2 {
				return fmt.Errorf("unsupported hook %q or priority %q", *ch.Hook, *ch.Priority)
			}
			b.w.str(unix.NFTA_CHAIN_TYPE, string(*ch.Type))
			n := b.w.nest(unix.NFTA_CHAIN_HOOK)
			b.w.u32(unix.NFTA_HOOK_HOOKNUM, hook)
			b.w.u32(unix.NFTA_HOOK_PRIORITY, uint32(prio))
			_ = b.w.end(n)
			if ch.Policy != nil {
				pol := uint32(1) // NF_ACCEPT
				if *ch.Policy == knftables.DropPolicy {
					pol = 0 // NF_DROP
				}
				b.w.u32(unix.NFTA_CHAIN_POLICY, pol)
			}
		}
		if ch.Comment != nil {
			b.w.udataStr(nftaChainUserdata, udTableComment, *ch.Comment)
		}
		finish(b.w.b, at)
	case Flush:
		b.named(unix.NFT_MSG_DELRULE, i, unix.NFTA_RULE_TABLE, unix.NFTA_RULE_CHAIN, ch.Name)
	case Delete:
		b.named(unix.NFT_MSG_DELCHAIN, i, unix.NFTA_CHAIN_TABLE, unix.NFTA_CHAIN_NAME, ch.Name)
	}
	return nil
}

func (b *batch) rule(i int, v Verb, r *knftables.Rule) error {
	switch v {
	case Add:
		if r.Index != nil || r.Handle != nil {
			return errors.New("rules are only appended")
		}
		exprs, ok := b.dnat.compile(b.c.fam == unix.NFPROTO_IPV6, r.Rule)
		if !ok {
			c, err := Compile(b.c.family, r.Rule)
			if err != nil {
				return err
			}
			if c.Anon != nil {
				b.anon(i, c)
			}
			exprs = c.Exprs
		}
		at := b.begin(nftType(unix.NFT_MSG_NEWRULE), unix.NLM_F_CREATE|unix.NLM_F_APPEND, i)
		b.w.str(unix.NFTA_RULE_TABLE, b.c.table)
		b.w.str(unix.NFTA_RULE_CHAIN, r.Chain)
		list := b.w.nest(unix.NFTA_RULE_EXPRESSIONS)
		var prev expr.Any
		for _, e := range exprs {
			b.setIDOf(e)
			n := b.w.nest(unix.NFTA_LIST_ELEM)
			if err := b.w.marshalExpr(b.c.fam, e, prev); err != nil {
				return err
			}
			_ = b.w.end(n)
			prev = e
		}
		if err := b.w.end(list); err != nil {
			return err
		}
		if r.Comment != nil {
			b.w.udataStr(unix.NFTA_RULE_USERDATA, udRuleComment, *r.Comment)
		}
		finish(b.w.b, at)
	case Delete:
		if r.Handle == nil {
			return errors.New("deleting a rule needs its handle")
		}
		at := b.begin(nftType(unix.NFT_MSG_DELRULE), 0, i)
		b.w.str(unix.NFTA_RULE_TABLE, b.c.table)
		b.w.str(unix.NFTA_RULE_CHAIN, r.Chain)
		b.w.u64(unix.NFTA_RULE_HANDLE, uint64(*r.Handle))
		finish(b.w.b, at)
	default:
		return errVerb
	}
	return nil
}

// Set flags (nf_tables.h).
const (
	setAnonymous = unix.NFT_SET_ANONYMOUS
	setConstant  = unix.NFT_SET_CONSTANT
	setInterval  = unix.NFT_SET_INTERVAL
	setMap       = unix.NFT_SET_MAP
	setTimeout   = unix.NFT_SET_TIMEOUT
	setEval      = unix.NFT_SET_EVAL
)

// verdictData appends a map element's verdict.
func (b *batch) verdictData(v expr.Verdict) {
	d := b.w.nest(unix.NFTA_SET_ELEM_DATA)
	vd := b.w.nest(unix.NFTA_DATA_VERDICT)
	b.w.u32(unix.NFTA_VERDICT_CODE, uint32(int32(v.Kind)))
	if v.Chain != "" {
		b.w.str(unix.NFTA_VERDICT_CHAIN, v.Chain)
	}
	_ = b.w.end(vd)
	_ = b.w.end(d)
}
