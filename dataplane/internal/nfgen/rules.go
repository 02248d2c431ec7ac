package nfgen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"golang.org/x/sys/unix"
)

// Families of the tables iptables-nft writes.
const (
	FamilyIPv4 = unix.NFPROTO_IPV4
	FamilyIPv6 = unix.NFPROTO_IPV6
)

// Rule is one rule as the kernel holds it, read over netlink.
type Rule struct {
	// Sum fingerprints the rule's expressions and comment, without its
	// counters (which traffic moves) or its handle: two reads of a rule
	// nobody changed give the same Sum.
	Sum uint64
	// Jump is the chain the rule jumps or goes to, if its verdict does.
	Jump string
}

// Table is the rules of one table, by chain, in order; a chain without
// rules is absent.
type Table map[string][]Rule

// Sum fingerprints the rules of chain in order.
func (t Table) Sum(chain string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, r := range t[chain] {
		binary.NativeEndian.PutUint64(b[:], r.Sum)
		h.Write(b[:])
	}
	return h.Sum64()
}

// Jumps reports whether a rule of chain jumps or goes to target.
func (t Table) Jumps(chain, target string) bool {
	for _, r := range t[chain] {
		if r.Jump == target {
			return true
		}
	}
	return false
}

// ReadTable dumps the rules of the table of family (FamilyIPv4 or
// FamilyIPv6) in the calling thread's network namespace: one netlink
// dump, no process, however the rules were written (iptables-nft, nft).
// A table that does not exist has no rules.
func ReadTable(ctx context.Context, family uint8, table string) (Table, error) {
	// A dump the kernel interrupted (a commit came in between its
	// parts) mixes two generations: read it again.
	var err error
	for range 3 {
		var t Table
		if t, err = readTable(ctx, family, table); !errors.Is(err, errInterrupted) {
			return t, err
		}
	}
	return nil, err
}

// errInterrupted is a dump the kernel marked NLM_F_DUMP_INTR.
var errInterrupted = errors.New("nfgen: dump interrupted by a concurrent change")

func readTable(ctx context.Context, family uint8, table string) (Table, error) {
	fd, err := open(ctx)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	const seq = 2
	if err := unix.Sendto(fd, ruleDump(seq, family, table), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("nfgen: send: %w", err)
	}
	out := Table{}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("nfgen: receive: %w", err)
		}
		done, err := parseRules(buf[:n], seq, out)
		if errors.Is(err, unix.ENOENT) {
			return Table{}, nil
		}
		if done || err != nil {
			return out, err
		}
	}
}

// open opens a netlink socket to nftables in the calling thread's network
// namespace, its receive timeout ctx's deadline or DefaultTimeout.
func open(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, fmt.Errorf("nfgen: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("nfgen: bind: %w", err)
	}
	wait := DefaultTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Until(dl), time.Millisecond)
	}
	tv := unix.NsecToTimeval(wait.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("nfgen: set timeout: %w", err)
	}
	return fd, nil
}

// Netlink attributes of a rule (NFTA_RULE_*, NFTA_LIST_*, NFTA_EXPR_*,
// NFTA_IMMEDIATE_*, NFTA_DATA_*, NFTA_VERDICT_*).
const (
	ruleTable       = 1
	ruleChain       = 2
	ruleExpressions = 4
	ruleCompat      = 5
	ruleUserdata    = 7
	listElem        = 1
	exprName        = 1
	exprData        = 2
	immediateData   = 2
	dataVerdict     = 2
	verdictCode     = 1
	verdictChain    = 2
	verdictJump     = 0xfffffffd // NFT_JUMP
	verdictGoto     = 0xfffffffc // NFT_GOTO
)

// ruleDump is a GETRULE dump request for one table.
func ruleDump(seq uint32, family uint8, table string) []byte {
	name := append([]byte(table), 0)
	attr := 4 + len(name)
	l := nlmsgHdrLen + nfgenLen + (attr+3)&^3
	b := make([]byte, 0, l)
	b = binary.NativeEndian.AppendUint32(b, uint32(l))
	b = binary.NativeEndian.AppendUint16(b, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETRULE)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, family, unix.NFNETLINK_V0, 0, 0)
	b = binary.NativeEndian.AppendUint16(b, uint16(attr))
	b = binary.NativeEndian.AppendUint16(b, ruleTable)
	b = append(b, name...)
	return append(b, make([]byte, l-len(b))...)
}

// parseRules adds the rules of one datagram of the dump answering seq to
// t; done is set by the dump's end.
func parseRules(b []byte, seq uint32, t Table) (done bool, err error) {
	for m := range messages(b, seq) {
		switch {
		case m.err != nil:
			return true, m.err
		case m.flags&unix.NLM_F_DUMP_INTR != 0:
			return true, errInterrupted
		case m.typ == unix.NLMSG_DONE:
			return true, nil
		case m.typ == unix.NLMSG_ERROR:
			if len(m.data) < 4 {
				return true, errors.New("nfgen: short error reply")
			}
			if code := int32(binary.NativeEndian.Uint32(m.data)); code != 0 {
				return true, fmt.Errorf("nfgen: %w", unix.Errno(-code))
			}
			return true, nil
		case m.typ == unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWRULE:
			if len(m.data) < nfgenLen {
				return true, errors.New("nfgen: short rule message")
			}
			chain, r := parseRule(m.data[nfgenLen:])
			t[chain] = append(t[chain], r)
		}
	}
	return false, nil
}

// parseRule reads one rule's attributes.
func parseRule(a []byte) (chain string, r Rule) {
	h := fnv.New64a()
	for typ, v := range attrs(a) {
		switch typ {
		case ruleChain:
			chain = cString(v)
		case ruleExpressions:
			for _, e := range attrs(v) {
				name, data := exprOf(e)
				if name == "counter" {
					continue
				}
				h.Write(e)
				if name == "immediate" {
					r.Jump = jumpOf(data)
				}
			}
		case ruleCompat, ruleUserdata:
			h.Write([]byte{byte(typ)})
			h.Write(v)
		}
	}
	r.Sum = h.Sum64()
	return chain, r
}

// exprOf splits one NFTA_LIST_ELEM into the expression's name and data.
func exprOf(elem []byte) (name string, data []byte) {
	for typ, v := range attrs(elem) {
		switch typ {
		case exprName:
			name = cString(v)
		case exprData:
			data = v
		}
	}
	return name, data
}

// jumpOf is the chain an immediate expression's verdict jumps or goes to.
func jumpOf(data []byte) string {
	for typ, v := range attrs(data) {
		if typ != immediateData {
			continue
		}
		for typ, v := range attrs(v) {
			if typ != dataVerdict {
				continue
			}
			var code uint32
			var chain string
			for typ, v := range attrs(v) {
				switch {
				case typ == verdictCode && len(v) >= 4:
					code = binary.BigEndian.Uint32(v)
				case typ == verdictChain:
					chain = cString(v)
				}
			}
			if code == verdictJump || code == verdictGoto {
				return chain
			}
		}
	}
	return ""
}

// attrs yields the netlink attributes of a, type (flags cleared) and
// value, in order.
func attrs(a []byte) func(yield func(uint16, []byte) bool) {
	return func(yield func(uint16, []byte) bool) {
		for len(a) >= 4 {
			l := int(binary.NativeEndian.Uint16(a))
			typ := binary.NativeEndian.Uint16(a[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
			if l < 4 || l > len(a) {
				return
			}
			if !yield(typ, a[4:l]) {
				return
			}
			a = a[min(len(a), (l+3)&^3):]
		}
	}
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
