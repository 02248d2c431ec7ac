package nftnl

import (
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// marshalExpr appends e's name and data; prev is the expression before
// it in its rule, nil for the first. Most expressions are encoded by
// google/nftables; the few it encodes otherwise than libnftnl (attribute
// order, an attribute more or less) are written here as nft 1.0.6 writes
// them, so that a batch's bytes are nft's.
func (w *buf) marshalExpr(fam byte, e, prev expr.Any) error {
	var data int
	switch e := e.(type) {
	case *expr.Lookup:
		w.str(unix.NFTA_EXPR_NAME, "lookup")
		data = w.nest(unix.NFTA_EXPR_DATA)
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
		w.str(unix.NFTA_EXPR_NAME, "bitwise")
		data = w.nest(unix.NFTA_EXPR_DATA)
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
		w.str(unix.NFTA_EXPR_NAME, "dynset")
		data = w.nest(unix.NFTA_EXPR_DATA)
		w.u32(unix.NFTA_DYNSET_SREG_KEY, e.SrcRegKey)
		w.u32(unix.NFTA_DYNSET_OP, e.Operation)
		w.str(unix.NFTA_DYNSET_SET_NAME, e.SetName)
		w.u32(unix.NFTA_DYNSET_SET_ID, e.SetID)
	case *expr.Fib:
		w.str(unix.NFTA_EXPR_NAME, "fib")
		data = w.nest(unix.NFTA_EXPR_DATA)
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

// nftaBitwiseOp is NFTA_BITWISE_OP, which x/sys/unix does not name.
const nftaBitwiseOp = 6
