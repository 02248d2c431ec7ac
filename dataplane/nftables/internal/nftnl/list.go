package nftnl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// request sends a get request (a dump when dump is set) with the
// attributes attr writes, and returns the payloads of its replies. A dump
// interrupted by a concurrent change is retried.
func (c *Conn) request(ctx context.Context, msg int, dump bool, attr func(w *buf)) ([][]byte, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	c.deadline(ctx)
	for try := 0; ; try++ {
		out, intr, err := c.exchange(msg, dump, attr)
		var ke *replyError
		if errors.As(err, &ke) {
			return nil, ke.errno
		}
		if err != nil {
			c.reset()
			return nil, err
		}
		if !intr || try == 10 {
			return out, nil
		}
	}
}

func (c *Conn) exchange(msg int, dump bool, attr func(w *buf)) (out [][]byte, intr bool, err error) {
	seq := c.nextSeq()
	flags := uint16(unix.NLM_F_REQUEST)
	if dump {
		flags |= unix.NLM_F_DUMP
	}
	var w buf
	var at int
	w.b, at = msgHeader(make([]byte, 0, 128), nftType(msg), flags, seq, c.fam, 0)
	if attr != nil {
		attr(&w)
	}
	finish(w.b, at)
	if err := c.send(w.b); err != nil {
		return nil, false, err
	}
	buf := c.readBuf()
	for {
		rs, err := c.recv(buf)
		if err != nil {
			return nil, false, err
		}
		for _, r := range rs {
			if r.seq != seq {
				continue
			}
			intr = intr || r.flags&unix.NLM_F_DUMP_INTR != 0
			switch r.typ {
			case unix.NLMSG_ERROR:
				if e := parseError(r); e.errno != 0 {
					return nil, false, &replyError{e.errno}
				}
				return out, intr, nil
			case unix.NLMSG_DONE:
				return out, intr, nil
			}
			out = append(out, slices.Clone(r.data))
			if !dump {
				return out, false, nil
			}
		}
	}
}

// replyError is the kernel's answer to a request: the exchange itself
// went fine.
type replyError struct{ errno syscall.Errno }

func (e *replyError) Error() string { return e.errno.Error() }

// notFound wraps ENOENT with what was not found.
func (c *Conn) notFound(what string, err error) error {
	if errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("nftnl: %s in table %s %s: %w", what, c.family, c.table, err)
	}
	return fmt.Errorf("nftnl: list %s of table %s %s: %w", what, c.family, c.table, err)
}

func (c *Conn) tableExists(ctx context.Context) error {
	_, err := c.request(ctx, unix.NFT_MSG_GETTABLE, false, func(w *buf) { w.str(unix.NFTA_TABLE_NAME, c.table) })
	if err != nil {
		return c.notFound("table", err)
	}
	return nil
}

// kset is a set or map as the kernel lists it.
type kset struct {
	name    string
	flags   uint32
	typ     *setType
	timeout *time.Duration
	size    *uint64
	comment string
}

func (s *kset) anonymous() bool { return s.flags&setAnonymous != 0 }

func parseSet(b []byte) (*kset, error) {
	s := &kset{}
	var keyType, dataType, keyLen uint32
	var ud []byte
	hasData := false
	a := attrs{b: b}
	for a.next() {
		switch a.typ {
		case unix.NFTA_SET_NAME:
			s.name = a.str()
		case unix.NFTA_SET_FLAGS:
			s.flags = a.u32()
		case unix.NFTA_SET_KEY_TYPE:
			keyType = a.u32()
		case unix.NFTA_SET_KEY_LEN:
			keyLen = a.u32()
		case unix.NFTA_SET_DATA_TYPE:
			dataType, hasData = a.u32(), true
		case unix.NFTA_SET_TIMEOUT:
			d := time.Duration(a.u64()) * time.Millisecond
			s.timeout = &d
		case unix.NFTA_SET_DESC:
			d := attrs{b: a.val}
			for d.next() {
				if d.typ == unix.NFTA_SET_DESC_SIZE {
					n := uint64(d.u32())
					s.size = &n
				}
			}
		case unix.NFTA_SET_USERDATA:
			ud = slices.Clone(a.val)
		}
	}
	if a.err != nil {
		return nil, a.err
	}
	typeOf, comment, ok := typeFromUdata(ud)
	s.comment = comment
	if !ok {
		return nil, fmt.Errorf("set %s: unreadable typeof", s.name)
	}
	if typeOf != "" {
		t, err := parseTypeOf(typeOf)
		if err != nil {
			return nil, err
		}
		s.typ = t
	} else {
		s.typ = &setType{key: kindsOfType(keyType)}
		if hasData {
			s.typ.data = kindsOfType(dataType)
		}
	}
	if s.typ.key == nil || hasData && s.typ.data == nil || uint32(length(s.typ.key)) != keyLen {
		return nil, fmt.Errorf("set %s: key type %#x of %d bytes is none nftnl reads", s.name, keyType, keyLen)
	}
	return s, nil
}

// kindsOfType splits a datatype number into its fields; nil when one is
// unknown.
func kindsOfType(t uint32) []kind {
	if t == dtVerdict {
		return []kind{kVerdict}
	}
	var out []kind
	for ; t != 0; t >>= dtTypeBits {
		k := slices.IndexFunc(kindInfo[:], func(i struct {
			name string
			dt   uint32
			size int
		}) bool {
			return i.dt == t&(1<<dtTypeBits-1)
		})
		if k < 0 || kind(k) == kVerdict {
			return nil
		}
		out = append(out, kind(k))
	}
	slices.Reverse(out)
	return out
}

func (c *Conn) getSet(ctx context.Context, name string) (*kset, error) {
	rs, err := c.request(ctx, unix.NFT_MSG_GETSET, false, func(w *buf) {
		w.str(unix.NFTA_SET_TABLE, c.table)
		w.str(unix.NFTA_SET_NAME, name)
	})
	if err != nil {
		return nil, c.notFound("set "+name, err)
	}
	return parseSet(rs[0])
}

func (c *Conn) sets(ctx context.Context) ([]*kset, error) {
	rs, err := c.request(ctx, unix.NFT_MSG_GETSET, true, func(w *buf) { w.str(unix.NFTA_SET_TABLE, c.table) })
	if err != nil {
		return nil, c.notFound("sets", err)
	}
	out := make([]*kset, 0, len(rs))
	for _, r := range rs {
		s, err := parseSet(r)
		if err != nil {
			return nil, c.notFound("sets", err)
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *Conn) chainNames(ctx context.Context) ([]string, error) {
	rs, err := c.request(ctx, unix.NFT_MSG_GETCHAIN, true, func(w *buf) { w.str(unix.NFTA_CHAIN_TABLE, c.table) })
	if err != nil {
		return nil, c.notFound("chains", err)
	}
	var out []string
	for _, r := range rs {
		if ch := parseChain(r); ch.table == c.table {
			out = append(out, ch.name)
		}
	}
	return out, nil
}

// List is knftables.Interface's List: the names of the table's chains,
// sets or maps ("chain", "set", "map", or their plurals).
func (c *Conn) List(ctx context.Context, objectType string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list(ctx, strings.TrimSuffix(objectType, "s"))
}

func (c *Conn) list(ctx context.Context, typ string) ([]string, error) {
	if err := c.tableExists(ctx); err != nil {
		return nil, err
	}
	switch typ {
	case "chain":
		return c.chainNames(ctx)
	case "set", "map":
		ss, err := c.sets(ctx)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, s := range ss {
			if !s.anonymous() && (s.flags&setMap != 0) == (typ == "map") {
				out = append(out, s.name)
			}
		}
		return out, nil
	case "counter", "flowtable":
		return nil, nil
	}
	return nil, fmt.Errorf("nftnl: can't List() type %q", typ)
}

// ListAll is knftables.Interface's ListAll: the table's object names by
// type ("table", "chain", "set", "map"), types without objects left out.
func (c *Conn) ListAll(ctx context.Context) (map[string][]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]string{"table": {c.table}}
	for _, typ := range []string{"chain", "set", "map"} {
		names, err := c.list(ctx, typ)
		if err != nil {
			return nil, err
		}
		if len(names) > 0 {
			out[typ] = names
		}
	}
	return out, nil
}

// ListElements is knftables.Interface's ListElements: the elements of a
// set or map, keys and values as nft prints them, a concatenation's
// fields one string each.
func (c *Conn) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.getSet(ctx, name)
	if err != nil {
		return nil, err
	}
	elems, err := c.elements(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]*knftables.Element, 0, len(elems))
	for _, e := range elems {
		ke, err := s.element(e)
		if err != nil {
			return nil, c.notFound(objectType+" "+name, err)
		}
		ke.Family, ke.Table = c.family, c.table
		if strings.TrimSuffix(objectType, "s") == "map" {
			ke.Map = name
		} else {
			ke.Set = name
		}
		out = append(out, ke)
	}
	return out, nil
}

// kelem is an element as the kernel lists it.
type kelem struct {
	key, data []byte
	verdict   *expr.Verdict
	end       bool
	comment   *string
}

func (c *Conn) elements(ctx context.Context, set string) ([]kelem, error) {
	rs, err := c.request(ctx, unix.NFT_MSG_GETSETELEM, true, func(w *buf) {
		w.str(unix.NFTA_SET_ELEM_LIST_TABLE, c.table)
		w.str(unix.NFTA_SET_ELEM_LIST_SET, set)
	})
	if err != nil {
		return nil, c.notFound("elements of "+set, err)
	}
	var out []kelem
	for _, r := range rs {
		a := attrs{b: r}
		for a.next() {
			if a.typ != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			l := attrs{b: a.val}
			for l.next() {
				out = append(out, parseElem(l.val))
			}
		}
	}
	return out, nil
}

func parseElem(b []byte) kelem {
	var e kelem
	a := attrs{b: b}
	for a.next() {
		switch a.typ {
		case unix.NFTA_SET_ELEM_KEY:
			e.key = dataValue(a.val)
		case unix.NFTA_SET_ELEM_DATA:
			d := attrs{b: a.val}
			for d.next() {
				switch d.typ {
				case unix.NFTA_DATA_VALUE:
					e.data = slices.Clone(d.val)
				case unix.NFTA_DATA_VERDICT:
					e.verdict = parseVerdictAttr(d.val)
				}
			}
		case unix.NFTA_SET_ELEM_FLAGS:
			e.end = a.u32()&unix.NFT_SET_ELEM_INTERVAL_END != 0
		case unix.NFTA_SET_ELEM_USERDATA:
			if s, ok := udataStringOf(a.val, udElemComment); ok {
				e.comment = &s
			}
		}
	}
	return e
}

func dataValue(b []byte) []byte {
	a := attrs{b: b}
	for a.next() {
		if a.typ == unix.NFTA_DATA_VALUE {
			return slices.Clone(a.val)
		}
	}
	return nil
}

func parseVerdictAttr(b []byte) *expr.Verdict {
	v := &expr.Verdict{}
	a := attrs{b: b}
	for a.next() {
		switch a.typ {
		case unix.NFTA_VERDICT_CODE:
			v.Kind = expr.VerdictKind(int32(a.u32()))
		case unix.NFTA_VERDICT_CHAIN:
			v.Chain = a.str()
		}
	}
	return v
}

// element is e as knftables lists it.
func (s *kset) element(e kelem) (*knftables.Element, error) {
	k, ok := valueText(s.typ.key, e.key)
	if !ok {
		return nil, fmt.Errorf("element key %x does not fit set %s", e.key, s.name)
	}
	out := &knftables.Element{Key: strings.Split(k, " . "), Comment: e.comment}
	switch {
	case e.verdict != nil:
		out.Value = []string{verdictText(e.verdict)}
	case s.typ.isMap():
		v, ok := valueText(s.typ.data, e.data)
		if !ok {
			return nil, fmt.Errorf("element value %x does not fit map %s", e.data, s.name)
		}
		out.Value = strings.Split(v, " . ")
	}
	return out, nil
}
