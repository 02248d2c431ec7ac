package nftnl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// Options configures a Conn.
type Options struct {
	// NetNS is the network namespace whose nftables the Conn talks to; nil
	// means the namespace of the thread that calls Open, which the Conn
	// keeps open so that a socket reopened after an error is in it too,
	// whichever thread reopens it.
	NetNS *os.File
	// Logger receives a line per failed transaction; the zero Logger
	// discards.
	Logger logr.Logger
}

// Conn is a netlink socket to the nftables of one namespace, bound to one
// table. Its methods are safe for concurrent use; they run one at a time.
type Conn struct {
	mu     sync.Mutex
	family knftables.Family
	fam    byte
	table  string
	opts   Options
	// ownNS is the caller's namespace Open kept, when opts had none.
	ownNS *os.File
	fd    int
	seq   uint32
	// sndbuf is the send buffer size last set.
	sndbuf int
	// types are the types of the table's sets and maps as last written or
	// read, for encoding elements.
	types map[string]*setType
	// setID numbers the sets a transaction creates.
	setID uint32
	// rbuf receives replies; what is kept of them is copied out.
	rbuf []byte
	// committed is the ruleset generation read right after the last
	// transaction, when it committed.
	committed   uint32
	isCommitted bool
}

// readBuf is the buffer replies are read into: the largest datagram a
// dump sends fits.
func (c *Conn) readBuf() []byte {
	if c.rbuf == nil {
		c.rbuf = make([]byte, 1<<20)
	}
	return c.rbuf
}

// rcvbuf is the receive buffer: replies are only errors and dumps, which
// the kernel sizes to what the buffer holds.
const rcvbuf = 4 << 20

// newConn is a Conn for table in family with no socket yet.
func newConn(family knftables.Family, table string) (*Conn, error) {
	c := &Conn{family: family, table: table, fd: -1, types: map[string]*setType{}}
	switch family {
	case knftables.IPv4Family:
		c.fam = unix.NFPROTO_IPV4
	case knftables.IPv6Family:
		c.fam = unix.NFPROTO_IPV6
	default:
		return nil, fmt.Errorf("nftnl: family %q is neither ip nor ip6", family)
	}
	if table == "" {
		return nil, errors.New("nftnl: no table name")
	}
	return c, nil
}

// Open opens a Conn for table in family (knftables.IPv4Family or
// IPv6Family). It needs CAP_NET_ADMIN in the namespace.
func Open(family knftables.Family, table string, opts Options) (*Conn, error) {
	c, err := newConn(family, table)
	if err != nil {
		return nil, err
	}
	c.opts = opts
	if opts.NetNS == nil {
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return nil, fmt.Errorf("nftnl: open current netns: %w", err)
		}
		c.opts.NetNS, c.ownNS = ns, ns
	}
	if err := c.open(); err != nil {
		c.closeNS()
		return nil, err
	}
	return c, nil
}

// closeNS closes the namespace Open kept.
func (c *Conn) closeNS() {
	if c.ownNS != nil {
		c.ownNS.Close()
		c.ownNS = nil
	}
}

// Close closes the socket.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.closeNS()
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// open makes the socket, in opts.NetNS when set.
func (c *Conn) open() error {
	if c.opts.NetNS == nil {
		return c.socket()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("nftnl: open current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(c.opts.NetNS.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("nftnl: enter netns: %w", err)
			return
		}
		err = c.socket()
		// A thread left in the other namespace is discarded with its
		// goroutine by staying locked.
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

func (c *Conn) socket() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("nftnl: netlink socket: %w", err)
	}
	for _, o := range [][2]int{{unix.NETLINK_EXT_ACK, 1}, {unix.NETLINK_CAP_ACK, 1}} {
		_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, o[0], o[1])
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("nftnl: bind netlink socket: %w", err)
	}
	c.fd, c.sndbuf = fd, 0
	return nil
}

// reset replaces the socket after an error, so that no reply of the failed
// exchange is read as one of the next.
func (c *Conn) reset() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	if err := c.open(); err != nil {
		c.opts.Logger.Error(err, "nftnl: reopen netlink socket")
	}
}

func (c *Conn) ready() error {
	if c.fd >= 0 {
		return nil
	}
	return c.open()
}

// deadline applies ctx's deadline to the socket's reads.
func (c *Conn) deadline(ctx context.Context) {
	var tv unix.Timeval
	if d, ok := ctx.Deadline(); ok {
		tv = unix.NsecToTimeval(max(time.Until(d), time.Millisecond).Nanoseconds())
	}
	_ = unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
}

// send writes b in one sendmsg, growing the send buffer to hold it.
func (c *Conn) send(b []byte) error {
	if need := len(b) + 4096; need > c.sndbuf {
		if unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, need) != nil {
			_ = unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, need)
		}
		c.sndbuf = need
	}
	for {
		err := unix.Sendto(c.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err != syscall.EINTR {
			if err != nil {
				return fmt.Errorf("nftnl: sendmsg of %d bytes: %w", len(b), err)
			}
			return nil
		}
	}
}

// netlink message layout.
const (
	nlmsgHdrLen = 16
	nfgenLen    = 4
)

// msgHeader appends a netlink header and nfgenmsg; the length is filled
// in by finish.
func msgHeader(b []byte, typ, flags uint16, seq uint32, family byte, resID uint16) ([]byte, int) {
	at := len(b)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, family, unix.NFNETLINK_V0)
	b = binary.BigEndian.AppendUint16(b, resID)
	return b, at
}

func finish(b []byte, at int) {
	binary.NativeEndian.PutUint32(b[at:], uint32(len(b)-at))
}

func nftType(msg int) uint16 { return uint16(unix.NFNL_SUBSYS_NFTABLES<<8 | msg) }

func (c *Conn) nextSeq() uint32 {
	c.seq++
	if c.seq == 0 {
		c.seq = 1
	}
	return c.seq
}

// reply is one message read back.
type reply struct {
	typ   uint16
	flags uint16
	seq   uint32
	// data follows the nfgenmsg, or is the error message's body.
	data []byte
}

// recv reads one datagram's messages.
func (c *Conn) recv(buf []byte) ([]reply, error) {
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		return parseReplies(buf[:n])
	}
}

func parseReplies(b []byte) ([]reply, error) {
	var out []reply
	for len(b) >= nlmsgHdrLen {
		n := int(binary.NativeEndian.Uint32(b))
		if n < nlmsgHdrLen || n > len(b) {
			return nil, errShort
		}
		r := reply{typ: binary.NativeEndian.Uint16(b[4:]), flags: binary.NativeEndian.Uint16(b[6:]), seq: binary.NativeEndian.Uint32(b[8:])}
		r.data = b[nlmsgHdrLen:n]
		if r.typ != unix.NLMSG_ERROR && r.typ != unix.NLMSG_DONE && len(r.data) >= nfgenLen {
			r.data = r.data[nfgenLen:]
		}
		out = append(out, r)
		b = b[nlaAlign(n):]
	}
	return out, nil
}

// kernelError is an NLMSG_ERROR reply: the errno and, with extended
// acks, the kernel's message and the offset of the attribute at fault.
type kernelError struct {
	errno  syscall.Errno
	msg    string
	offset int
}

func parseError(r reply) kernelError {
	if len(r.data) < 4 {
		return kernelError{errno: syscall.EIO, offset: -1}
	}
	e := kernelError{errno: syscall.Errno(-int32(binary.NativeEndian.Uint32(r.data))), offset: -1}
	if r.flags&unix.NLM_F_ACK_TLVS == 0 {
		return e
	}
	rest := r.data[4:]
	skip := nlmsgHdrLen
	if r.flags&unix.NLM_F_CAPPED == 0 && len(rest) >= 4 {
		skip = int(binary.NativeEndian.Uint32(rest))
	}
	if skip > len(rest) {
		return e
	}
	a := attrs{b: rest[nlaAlign(skip):]}
	for a.next() {
		switch a.typ {
		case unix.NLMSGERR_ATTR_MSG:
			e.msg = a.str()
		case unix.NLMSGERR_ATTR_OFFS:
			e.offset = int(binary.NativeEndian.Uint32(a.val))
		}
	}
	return e
}

// Generation is the ruleset's generation: the kernel counts every
// committed nftables transaction in the namespace, made by anyone.
func (c *Conn) Generation(ctx context.Context) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ready(); err != nil {
		return 0, err
	}
	c.deadline(ctx)
	gen, err := c.generation(nil)
	if err != nil {
		c.reset()
		return 0, fmt.Errorf("nftnl: read generation: %w", err)
	}
	return gen, nil
}

// Committed returns the ruleset generation read right after the last
// transaction Run committed, with it: a caller that follows the
// generation needs no Generation call after its own commits. ok is false
// when the last Run did not commit.
func (c *Conn) Committed() (gen uint32, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.committed, c.isCommitted
}

// generation asks for the generation and reads replies until its answer;
// every error reply read before it is passed to onError. Because the
// kernel handles a batch within its sendmsg, a generation asked for after
// a batch is answered after every reply of the batch.
func (c *Conn) generation(onError func(reply)) (uint32, error) {
	seq := c.nextSeq()
	b, at := msgHeader(make([]byte, 0, 20), nftType(unix.NFT_MSG_GETGEN), unix.NLM_F_REQUEST, seq, unix.AF_UNSPEC, 0)
	finish(b, at)
	if err := c.send(b); err != nil {
		return 0, err
	}
	buf := c.readBuf()
	var overrun error
	for {
		rs, err := c.recv(buf)
		if errors.Is(err, syscall.ENOBUFS) {
			// Replies were lost; what follows is still read in order.
			overrun = err
			continue
		}
		if err != nil {
			return 0, err
		}
		for _, r := range rs {
			switch {
			case r.seq == seq && r.typ == nftType(unix.NFT_MSG_NEWGEN):
				a := attrs{b: r.data}
				for a.next() {
					if a.typ == unix.NFTA_GEN_ID {
						return a.u32(), overrun
					}
				}
				return 0, errors.New("generation reply without an id")
			case r.seq == seq && r.typ == unix.NLMSG_ERROR:
				return 0, parseError(r).errno
			case r.typ == unix.NLMSG_ERROR && onError != nil:
				r.data = slices.Clone(r.data) // buf is read into again
				onError(r)
			}
		}
	}
}
