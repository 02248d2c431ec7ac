package nfgen

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// attr is one netlink attribute, padded to four bytes.
func attr(typ uint16, v []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// msg is one netlink message of typ, flags and seq around payload.
func msg(typ, flags uint16, seq uint32, payload []byte) []byte {
	b := binary.NativeEndian.AppendUint32(nil, uint32(nlmsgHdrLen+len(payload)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	return append(b, payload...)
}

// ruleMsg is a NEWRULE message of chain whose one expression is an
// immediate verdict jumping to target ("" for none), then a counter.
func ruleMsg(seq uint32, chain, target string, flags uint16) []byte {
	verdict := attr(verdictCode, binary.BigEndian.AppendUint32(nil, verdictJump))
	if target != "" {
		verdict = append(verdict, attr(verdictChain, append([]byte(target), 0))...)
	}
	imm := attr(immediateData, attr(dataVerdict, verdict))
	exprs := attr(1, append(attr(exprName, []byte("immediate\x00")), attr(exprData, imm)...))
	exprs = append(exprs, attr(1, append(attr(exprName, []byte("counter\x00")), attr(exprData, attr(1, make([]byte, 8)))...))...)
	payload := append(make([]byte, nfgenLen), attr(ruleChain, append([]byte(chain), 0))...)
	payload = append(payload, attr(ruleExpressions, exprs)...)
	return msg(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWRULE, flags, seq, payload)
}

func errMsg(seq uint32, code int32) []byte {
	return msg(unix.NLMSG_ERROR, 0, seq, binary.NativeEndian.AppendUint32(nil, uint32(code)))
}

// TestParseRules reads dump replies built by hand: rules by chain with
// their jumps, another request's messages skipped, errors, a truncated
// message and an interrupted dump.
func TestParseRules(t *testing.T) {
	type result struct {
		Jumps map[string][]string
		Done  bool
		Err   error
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want result
	}{{
		name: "rules then done",
		in: concat(ruleMsg(2, "OUTPUT", "SVC", 0), ruleMsg(2, "OUTPUT", "", 0), ruleMsg(2, "SVC", "SEP", 0),
			msg(unix.NLMSG_DONE, 0, 2, nil)),
		want: result{Jumps: map[string][]string{"OUTPUT": {"SVC", ""}, "SVC": {"SEP"}}, Done: true},
	}, {
		name: "another request's messages",
		in:   concat(ruleMsg(7, "OUTPUT", "X", 0), msg(unix.NLMSG_DONE, 0, 7, nil)),
		want: result{Jumps: map[string][]string{}},
	}, {
		name: "more to come",
		in:   ruleMsg(2, "OUTPUT", "SVC", 0),
		want: result{Jumps: map[string][]string{"OUTPUT": {"SVC"}}},
	}, {
		name: "no table",
		in:   errMsg(2, -int32(unix.ENOENT)),
		want: result{Jumps: map[string][]string{}, Done: true, Err: unix.ENOENT},
	}, {
		name: "acknowledged",
		in:   errMsg(2, 0),
		want: result{Jumps: map[string][]string{}, Done: true},
	}, {
		name: "truncated",
		in:   ruleMsg(2, "OUTPUT", "SVC", 0)[:20],
		want: result{Jumps: map[string][]string{}, Done: true, Err: errTruncated},
	}, {
		name: "interrupted",
		in:   ruleMsg(2, "OUTPUT", "SVC", unix.NLM_F_DUMP_INTR),
		want: result{Jumps: map[string][]string{}, Done: true, Err: errInterrupted},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tb := Table{}
			done, err := parseRules(tc.in, 2, tb)
			got := result{Jumps: map[string][]string{}, Done: done, Err: err}
			for chain, rules := range tb {
				for _, r := range rules {
					got.Jumps[chain] = append(got.Jumps[chain], r.Jump)
				}
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b error) bool {
				return (a == nil) == (b == nil) && (a == nil || errors.Is(a, b) || errors.Is(b, a))
			})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestRuleSumIgnoresCounters: two reads of a rule that differ only in
// its counter have the same Sum; another jump changes it.
func TestRuleSumIgnoresCounters(t *testing.T) {
	sum := func(m []byte) uint64 {
		tb := Table{}
		if _, err := parseRules(m, 2, tb); err != nil {
			t.Fatal(err)
		}
		return tb["C"][0].Sum
	}
	a := ruleMsg(2, "C", "SVC", 0)
	b := ruleMsg(2, "C", "SVC", 0)
	b[len(b)-1] = 9 // the counter's value
	if sum(a) != sum(b) {
		t.Error("a counter changed the rule's Sum")
	}
	if sum(a) == sum(ruleMsg(2, "C", "OTHER", 0)) {
		t.Error("another jump kept the rule's Sum")
	}
}

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
