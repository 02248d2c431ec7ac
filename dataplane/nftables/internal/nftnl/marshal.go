package nftnl

import (
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// marshalExpr appends e's name and data; prev is the expression before
// it in its rule, nil for the first. The expressions Compile writes are
// encoded here, as nft 1.0.6 encodes them (google/nftables orders the
// attributes of lookup, bitwise, dynset and fib otherwise, and allocates
// for every attribute); any other is left to google/nftables.
func (w *buf) marshalExpr(fam byte, e, prev expr.Any) error {
	if ok, err := w.marshalPlain(e); ok {
		return err
	}
	var data int
	switch e := e.(type) {
	case *expr.Lookup:
		data = w.named("lookup")
		w.u32(unix.NFTA_LOOKUP_SREG, e.SourceRegister)
		if e.IsDestRegSet {
			w.u32(unix.NFTA_LOOKUP_DREG, e.DestRegister)
		}
		w.str(unix.NFTA_LOOKUP_SET, e.SetName)
		w.u32(unix.NFTA_LOOKUP_SET_ID, e.SetID)
		if e.Invert {
			w.u32(unix.NFTA_LOOKUP_FLAGS, unix.NFT_LOOKUP_F_INV)
		}
	case *expr.Bitwise:
		data = w.named("bitwise")
		w.u32(unix.NFTA_BITWISE_SREG, e.SourceRegister)
		w.u32(unix.NFTA_BITWISE_DREG, e.DestRegister)
		// nft writes the operation (NFT_BITWISE_BOOL: mask, then xor) for
		// an operation on a value (the mark) but not for a flag test
		// (ct state new), which follows the ct load.
		if _, flagTest := prev.(*expr.Ct); !flagTest {
			w.u32(nftaBitwiseOp, 0)
		}
		w.u32(unix.NFTA_BITWISE_LEN, e.Len)
		for _, v := range []struct {
			typ uint16
			b   []byte
		}{{unix.NFTA_BITWISE_MASK, e.Mask}, {unix.NFTA_BITWISE_XOR, e.Xor}} {
			n := w.nest(v.typ)
			w.attr(unix.NFTA_DATA_VALUE, v.b)
			_ = w.end(n)
		}
	case *expr.Dynset:
		data = w.named("dynset")
		w.u32(unix.NFTA_DYNSET_SREG_KEY, e.SrcRegKey)
		w.u32(unix.NFTA_DYNSET_OP, e.Operation)
		w.str(unix.NFTA_DYNSET_SET_NAME, e.SetName)
		w.u32(unix.NFTA_DYNSET_SET_ID, e.SetID)
	case *expr.Fib:
		data = w.named("fib")
		flags := uint32(unix.NFTA_FIB_F_DADDR)
		if e.FlagSADDR {
			flags = unix.NFTA_FIB_F_SADDR
		}
		w.u32(unix.NFTA_FIB_FLAGS, flags)
		w.u32(unix.NFTA_FIB_RESULT, unix.NFT_FIB_RESULT_ADDRTYPE)
		w.u32(unix.NFTA_FIB_DREG, e.Register)
	default:
		b, err := expr.Marshal(fam, e)
		w.b = append(w.b, b...)
		return err
	}
	return w.end(data)
}

// marshalPlain appends the expressions Compile writes most, in the
// attribute order of google/nftables (which is libnftnl's for these) but
// without its allocations: a cold sync writes hundreds of thousands. It
// reports false for any other expression.
func (w *buf) marshalPlain(e expr.Any) (bool, error) {
	var data int
	switch e := e.(type) {
	case *expr.Payload:
		if e.OperationType != expr.PayloadLoad || e.CsumType != 0 {
			return false, nil
		}
		data = w.named("payload")
		w.u32(unix.NFTA_PAYLOAD_DREG, e.DestRegister)
		w.u32(unix.NFTA_PAYLOAD_BASE, uint32(e.Base))
		w.u32(unix.NFTA_PAYLOAD_OFFSET, e.Offset)
		w.u32(unix.NFTA_PAYLOAD_LEN, e.Len)
	case *expr.Meta:
		data = w.named("meta")
		w.u32(unix.NFTA_META_KEY, uint32(e.Key))
		if e.SourceRegister {
			w.u32(unix.NFTA_META_SREG, e.Register)
		} else {
			w.u32(unix.NFTA_META_DREG, e.Register)
		}
	case *expr.Cmp:
		data = w.named("cmp")
		w.u32(unix.NFTA_CMP_SREG, e.Register)
		w.u32(unix.NFTA_CMP_OP, uint32(e.Op))
		w.value(unix.NFTA_CMP_DATA, e.Data)
	case *expr.Immediate:
		data = w.named("immediate")
		w.u32(unix.NFTA_IMMEDIATE_DREG, e.Register)
		w.value(unix.NFTA_IMMEDIATE_DATA, e.Data)
	case *expr.Verdict:
		data = w.named("immediate")
		w.u32(unix.NFTA_IMMEDIATE_DREG, unix.NFT_REG_VERDICT)
		d := w.nest(unix.NFTA_IMMEDIATE_DATA)
		v := w.nest(unix.NFTA_DATA_VERDICT)
		w.u32(unix.NFTA_VERDICT_CODE, uint32(e.Kind))
		if e.Chain != "" {
			w.str(unix.NFTA_VERDICT_CHAIN, e.Chain)
		}
		_ = w.end(v)
		_ = w.end(d)
	case *expr.Ct:
		if e.SourceRegister || e.Key != expr.CtKeySTATE && e.Key != expr.CtKeySTATUS {
			return false, nil
		}
		data = w.named("ct")
		w.u32(unix.NFTA_CT_KEY, uint32(e.Key))
		w.u32(unix.NFTA_CT_DREG, e.Register)
	case *expr.Numgen:
		data = w.named("numgen")
		w.u32(unix.NFTA_NG_DREG, e.Register)
		w.u32(unix.NFTA_NG_MODULUS, e.Modulus)
		w.u32(unix.NFTA_NG_TYPE, e.Type)
		w.u32(unix.NFTA_NG_OFFSET, e.Offset)
	case *expr.NAT:
		if e.Random || e.FullyRandom || e.Persistent || e.Prefix || e.RegAddrMax != 0 || e.RegProtoMax != 0 {
			return false, nil
		}
		data = w.named("nat")
		w.u32(unix.NFTA_NAT_TYPE, uint32(e.Type))
		w.u32(unix.NFTA_NAT_FAMILY, e.Family)
		for _, r := range [][3]uint32{{unix.NFTA_NAT_REG_ADDR_MIN, e.RegAddrMin, unix.NFTA_NAT_REG_ADDR_MAX}, {unix.NFTA_NAT_REG_PROTO_MIN, e.RegProtoMin, unix.NFTA_NAT_REG_PROTO_MAX}} {
			if r[1] != 0 {
				w.u32(uint16(r[0]), r[1])
			}
		}
		if e.Specified {
			w.u32(unix.NFTA_NAT_FLAGS, natProtoSpecified)
		}
	case *expr.Masq:
		if !e.FullyRandom || e.Random || e.Persistent || e.ToPorts {
			return false, nil
		}
		data = w.named("masq")
		w.u32(unix.NFTA_MASQ_FLAGS, natFullyRandom)
	case *expr.Reject:
		data = w.named("reject")
		w.u32(unix.NFTA_REJECT_TYPE, e.Type)
		w.attr(unix.NFTA_REJECT_ICMP_CODE, []byte{e.Code})
	default:
		return false, nil
	}
	return true, w.end(data)
}

// named appends an expression's name and opens its data.
func (w *buf) named(name string) int {
	w.str(unix.NFTA_EXPR_NAME, name)
	return w.nest(unix.NFTA_EXPR_DATA)
}

// value appends a nested NFTA_DATA_VALUE.
func (w *buf) value(typ uint16, v []byte) {
	n := w.nest(typ)
	w.attr(unix.NFTA_DATA_VALUE, v)
	_ = w.end(n)
}

// NAT range flags (nf_nat.h).
const (
	natProtoSpecified = 0x2
	natFullyRandom    = 0x10
)

// nftaBitwiseOp is NFTA_BITWISE_OP, which x/sys/unix does not name.
const nftaBitwiseOp = 6
