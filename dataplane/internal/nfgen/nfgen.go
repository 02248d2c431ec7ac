package nfgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds a Read whose context has no deadline.
const DefaultTimeout = 2 * time.Second

const (
	nlmsgHdrLen = 16
	nfgenLen    = 4
	attrGenID   = 1 // NFTA_GEN_ID
)

// Read returns the ruleset generation of the calling thread's network
// namespace. It opens and closes a netlink socket: one request, one
// reply. An error means the kernel could not be asked (no nf_tables, no
// permission), not that anything changed.
func Read(ctx context.Context) (uint32, error) {
	fd, err := open(ctx)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	const seq = 1
	if err := unix.Sendto(fd, request(seq), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("nfgen: send: %w", err)
	}
	buf := make([]byte, 512)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, fmt.Errorf("nfgen: receive: %w", err)
		}
		gen, done, err := parse(buf[:n], seq)
		if done || err != nil {
			return gen, err
		}
	}
}

// request is a GETGEN message.
func request(seq uint32) []byte {
	b := make([]byte, 0, nlmsgHdrLen+nfgenLen)
	b = binary.NativeEndian.AppendUint32(b, nlmsgHdrLen+nfgenLen)
	b = binary.NativeEndian.AppendUint16(b, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETGEN)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	return append(b, unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0)
}

var errNoID = errors.New("nfgen: generation reply without an id")

// parse reads the messages of one datagram, looking for the answer to
// seq: done is set when it was found (an error reply included).
func parse(b []byte, seq uint32) (gen uint32, done bool, err error) {
	for m := range messages(b, seq) {
		switch {
		case m.err != nil:
			return 0, true, m.err
		case m.typ == unix.NLMSG_ERROR:
			if len(m.data) < 4 {
				return 0, true, errors.New("nfgen: short error reply")
			}
			return 0, true, fmt.Errorf("nfgen: %w", unix.Errno(-int32(binary.NativeEndian.Uint32(m.data))))
		case m.typ == unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWGEN:
			gen, err := genID(m.data)
			return gen, true, err
		}
	}
	return 0, false, nil
}

// message is one netlink message of a reply: its type, flags and payload,
// or the error that ends the reply.
type message struct {
	typ, flags uint16
	data       []byte
	err        error
}

var errTruncated = errors.New("nfgen: truncated netlink message")

// messages yields the messages of b that answer request seq; a truncated
// one ends them with errTruncated.
func messages(b []byte, seq uint32) func(yield func(message) bool) {
	return func(yield func(message) bool) {
		for len(b) >= nlmsgHdrLen {
			l := int(binary.NativeEndian.Uint32(b))
			if l < nlmsgHdrLen || l > len(b) {
				yield(message{err: errTruncated})
				return
			}
			m := message{typ: binary.NativeEndian.Uint16(b[4:]), flags: binary.NativeEndian.Uint16(b[6:]), data: b[nlmsgHdrLen:l]}
			s := binary.NativeEndian.Uint32(b[8:])
			b = b[min(len(b), (l+3)&^3):]
			if s == seq && !yield(m) {
				return
			}
		}
	}
}

// genID finds NFTA_GEN_ID in a NEWGEN message's payload.
func genID(data []byte) (uint32, error) {
	if len(data) < nfgenLen {
		return 0, errNoID
	}
	a := data[nfgenLen:]
	for len(a) >= 4 {
		l := int(binary.NativeEndian.Uint16(a))
		typ := binary.NativeEndian.Uint16(a[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(a) {
			break
		}
		if typ == attrGenID && l >= 8 {
			return binary.BigEndian.Uint32(a[4:]), nil
		}
		a = a[min(len(a), (l+3)&^3):]
	}
	return 0, errNoID
}
