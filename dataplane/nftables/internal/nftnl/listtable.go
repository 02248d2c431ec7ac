package nftnl

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ListTable is the table as nft 1.0.6's "nft list table" prints it, for
// reading the table where there is no nft binary. Rules print in nft's
// listing syntax ("meta mark & 0x00004000 != 0x00000000"), which differs
// from the text Compile takes; a rule that does not read is a *RuleError.
func (c *Conn) ListTable(ctx context.Context) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs, err := c.request(ctx, unix.NFT_MSG_GETTABLE, false, func(w *buf) { w.str(unix.NFTA_TABLE_NAME, c.table) })
	if err != nil {
		return nil, c.notFound("table", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "table %s %s {\n", c.family, c.table)
	a := attrs{b: rs[0]}
	for a.next() {
		if a.typ == nftaTableUserdata {
			if s, ok := udataStringOf(a.val, udTableComment); ok {
				fmt.Fprintf(&b, "\tcomment %q\n", s)
			}
		}
	}
	var blocks []string
	sets, err := c.sets(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		if s.anonymous() {
			continue
		}
		block, err := c.setBlock(ctx, s)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, block)
	}
	chains, err := c.chainBlocks(ctx)
	if err != nil {
		return nil, err
	}
	b.WriteString(strings.Join(append(blocks, chains...), "\n"))
	b.WriteString("}\n")
	return b.Bytes(), nil
}

func (c *Conn) setBlock(ctx context.Context, s *kset) (string, error) {
	var b strings.Builder
	kind := "set"
	if s.flags&setMap != 0 {
		kind = "map"
	}
	fmt.Fprintf(&b, "\t%s %s {\n", kind, s.name)
	if s.typ.typeof {
		fmt.Fprintf(&b, "\t\ttypeof %s\n", s.typ)
	} else {
		fmt.Fprintf(&b, "\t\ttype %s\n", s.typ)
	}
	if s.size != nil && *s.size != 0 {
		fmt.Fprintf(&b, "\t\tsize %d\n", *s.size)
	}
	var flags []string
	for _, f := range []struct {
		bit  uint32
		name string
	}{{setConstant, "constant"}, {setEval, "dynamic"}, {setInterval, "interval"}, {setTimeout, "timeout"}} {
		if s.flags&f.bit != 0 {
			flags = append(flags, f.name)
		}
	}
	// A timeout says the timeout flag; nft shows it only among others.
	if len(flags) > 1 || len(flags) == 1 && (flags[0] != "timeout" || s.timeout == nil) {
		fmt.Fprintf(&b, "\t\tflags %s\n", strings.Join(flags, ","))
	}
	if s.timeout != nil {
		fmt.Fprintf(&b, "\t\ttimeout %s\n", nftDuration(*s.timeout))
	}
	if s.comment != "" {
		fmt.Fprintf(&b, "\t\tcomment %q\n", s.comment)
	}
	elems, err := c.elements(ctx, s.name)
	if err != nil {
		return "", err
	}
	if len(elems) > 0 {
		b.WriteString("\t\telements = { ")
		if err := s.writeElements(&b, elems); err != nil {
			return "", c.notFound("elements of "+s.name, err)
		}
		b.WriteString(" }\n")
	}
	b.WriteString("\t}\n")
	return b.String(), nil
}

// writeElements writes elements sorted by key value, as many to a line
// as nft puts: two IPv4 addresses, one IPv6 address or concatenation,
// and all of a map keyed by integer.
func (s *kset) writeElements(b *strings.Builder, elems []kelem) error {
	slices.SortFunc(elems, func(x, y kelem) int { return compareKeys(s.typ.key, x.key, y.key) })
	perLine := 0
	switch {
	case len(s.typ.key) > 1 || s.typ.key[0] == kIPv6:
		perLine = 1
	case s.typ.key[0] == kIPv4:
		perLine = 2
	}
	for i, e := range elems {
		if i > 0 {
			if perLine > 0 && i%perLine == 0 {
				b.WriteString(",\n\t\t\t     ")
			} else {
				b.WriteString(", ")
			}
		}
		ke, err := s.element(e)
		if err != nil {
			return err
		}
		b.WriteString(strings.Join(ke.Key, " . "))
		if ke.Comment != nil {
			fmt.Fprintf(b, " comment %q", *ke.Comment)
		}
		if len(ke.Value) > 0 {
			b.WriteString(" : " + strings.Join(ke.Value, " . "))
		}
	}
	return nil
}

// compareKeys orders keys as nft sorts them for listing: a single value
// by its number; a concatenation by its fields' bytes laid end to end
// without padding and read as one host-order (little-endian) number, so
// from its last byte (nft's concat_expr_msort_value).
func compareKeys(ks []kind, x, y []byte) int {
	if len(ks) == 1 {
		if ks[0] == kInteger && len(x) == 4 && len(y) == 4 {
			a, b := binary.NativeEndian.Uint32(x), binary.NativeEndian.Uint32(y)
			return int(int64(a) - int64(b))
		}
		return bytes.Compare(x, y)
	}
	ux, uy := unpadded(ks, x), unpadded(ks, y)
	if len(ux) != len(uy) {
		return len(ux) - len(uy)
	}
	for i := len(ux) - 1; i >= 0; i-- {
		if ux[i] != uy[i] {
			return int(ux[i]) - int(uy[i])
		}
	}
	return 0
}

// unpadded is a concatenated key's fields without their padding.
func unpadded(ks []kind, b []byte) []byte {
	var out []byte
	for _, k := range ks {
		size := kindInfo[k].size
		if len(b) < size {
			return out
		}
		out = append(out, b[:size]...)
		b = b[min(nlaAlign(size), len(b)):]
	}
	return out
}

// nftDuration prints d as nft does: "3h", "1h10s", "1d".
func nftDuration(d time.Duration) string {
	ms := d.Milliseconds()
	var b strings.Builder
	for _, u := range []struct {
		ms   int64
		name string
	}{{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}} {
		if n := ms / u.ms; n > 0 {
			b.WriteString(strconv.FormatInt(n, 10) + u.name)
			ms -= n * u.ms
		}
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}

// chainBlocks are the table's chains with their rules, as nft lists them.
func (c *Conn) chainBlocks(ctx context.Context) ([]string, error) {
	rs, err := c.request(ctx, unix.NFT_MSG_GETCHAIN, true, func(w *buf) { w.str(unix.NFTA_CHAIN_TABLE, c.table) })
	if err != nil {
		return nil, c.notFound("chains", err)
	}
	rules, err := c.readRules(ctx, "", true)
	if err != nil {
		return nil, err
	}
	byChain := map[string][]string{}
	for _, r := range rules {
		text := r.listing
		if r.Comment != nil {
			text += fmt.Sprintf(" comment %q", *r.Comment)
		}
		byChain[r.Chain] = append(byChain[r.Chain], text)
	}
	var out []string
	for _, cb := range rs {
		ch := parseChain(cb)
		if ch.table != c.table {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "\tchain %s {\n", ch.name)
		if ch.base {
			fmt.Fprintf(&b, "\t\ttype %s hook %s priority %s; policy %s;\n", ch.typ, hookName(ch.hook), priorityText(ch.hook, ch.prio), ch.policy)
		}
		for _, r := range byChain[ch.name] {
			b.WriteString("\t\t" + r + "\n")
		}
		b.WriteString("\t}\n")
		out = append(out, b.String())
	}
	return out, nil
}

// kchain is a chain as the kernel lists it.
type kchain struct {
	table, name, typ, policy string
	base                     bool
	hook                     uint32
	prio                     int32
}

func parseChain(b []byte) kchain {
	ch := kchain{policy: "accept"}
	a := attrs{b: b}
	for a.next() {
		switch a.typ {
		case unix.NFTA_CHAIN_TABLE:
			ch.table = a.str()
		case unix.NFTA_CHAIN_NAME:
			ch.name = a.str()
		case unix.NFTA_CHAIN_TYPE:
			ch.typ = a.str()
		case unix.NFTA_CHAIN_POLICY:
			if a.u32() == 0 {
				ch.policy = "drop"
			}
		case unix.NFTA_CHAIN_HOOK:
			ch.base = true
			h := attrs{b: a.val}
			for h.next() {
				switch h.typ {
				case unix.NFTA_HOOK_HOOKNUM:
					ch.hook = h.u32()
				case unix.NFTA_HOOK_PRIORITY:
					ch.prio = int32(h.u32())
				}
			}
		}
	}
	return ch
}

func hookName(h uint32) string {
	names := [...]string{"prerouting", "input", "forward", "output", "postrouting"}
	if int(h) < len(names) {
		return names[h]
	}
	return strconv.Itoa(int(h))
}

// priorityText is a priority as nft lists it in the ip families: a
// standard priority the hook allows, plus or minus up to 10, else the
// number.
func priorityText(hook uint32, prio int32) string {
	for _, s := range []struct {
		name  string
		prio  int32
		hooks []uint32
	}{
		{"raw", -300, nil}, {"mangle", -150, nil}, {"dstnat", -100, []uint32{unix.NF_INET_PRE_ROUTING}},
		{"filter", 0, nil}, {"security", 50, nil}, {"srcnat", 100, []uint32{unix.NF_INET_POST_ROUTING}},
	} {
		if s.hooks != nil && !slices.Contains(s.hooks, hook) {
			continue
		}
		switch off := prio - s.prio; {
		case off == 0:
			return s.name
		case off > 0 && off <= 10:
			return fmt.Sprintf("%s + %d", s.name, off)
		case off < 0 && off >= -10:
			return fmt.Sprintf("%s - %d", s.name, -off)
		}
	}
	return strconv.Itoa(int(prio))
}
