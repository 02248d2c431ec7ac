package nfacct

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 2 * time.Second

// Message types and attributes of nfnetlink_acct (linux/netfilter/nfnetlink_acct.h).
const (
	msgNew = 0 // NFNL_MSG_ACCT_NEW
	msgGet = 1 // NFNL_MSG_ACCT_GET

	attrName    = 1 // NFACCT_NAME, NUL-terminated
	attrPackets = 2 // NFACCT_PKTS, big-endian u64
	attrBytes   = 3 // NFACCT_BYTES, big-endian u64
)

// Client is the Interface of a real kernel. Its methods are safe for
// concurrent use.
type Client struct {
	// mu serializes calls, so that one call's deadline is not another's.
	mu   sync.Mutex
	conn *netlink.Conn
	// deadlines is whether the socket takes deadlines (a real one does).
	deadlines bool
}

var _ Interface = (*Client)(nil)

// Dial opens a netlink socket in the calling thread's network namespace;
// the Client keeps working there from any thread. An error wrapping
// ErrNotSupported means the kernel has no netfilter netlink at all; one
// without nfnetlink_acct is only found out by the first call.
func Dial() (*Client, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("nfacct: dial: %w", classify(err))
	}
	return &Client{conn: conn, deadlines: true}, nil
}

// Close closes the socket.
func (c *Client) Close() error { return c.conn.Close() }

// Ensure implements Interface. It asks for the counter to be created in
// one round trip: the kernel answers EBUSY when it exists, which leaves
// its totals alone.
func (c *Client) Ensure(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	_, err := c.execute(ctx, msgNew, netlink.Request|netlink.Acknowledge|netlink.Create, name)
	if err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("nfacct: create counter %q: %w", name, err)
	}
	return nil
}

// Get implements Interface. It lists every counter of the namespace
// (a handful) and picks name: the kernel's answer to a request for one
// counter is flagged as part of a multi-part reply that it never ends, so
// only a listing, which it does end, can be read to completion.
func (c *Client) Get(ctx context.Context, name string) (Counter, error) {
	if err := checkName(name); err != nil {
		return Counter{}, err
	}
	msgs, err := c.execute(ctx, msgGet, netlink.Request|netlink.Dump, "")
	if err != nil {
		return Counter{}, fmt.Errorf("nfacct: get counter %q: %w", name, err)
	}
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_ACCT<<8|msgNew) {
			continue
		}
		counter, err := decode(m.Data)
		if err != nil {
			return Counter{}, fmt.Errorf("nfacct: get counter %q: %w", name, err)
		}
		if counter.Name == name {
			return counter, nil
		}
	}
	return Counter{}, fmt.Errorf("nfacct: get counter %q: %w", name, ErrNotExist)
}

// execute sends one request, about counter name unless it is "", and
// returns the replies.
func (c *Client) execute(ctx context.Context, typ int, flags netlink.HeaderFlags, name string) ([]netlink.Message, error) {
	data, err := encode(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadlines {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(DefaultTimeout)
		}
		if err := c.conn.SetDeadline(deadline); err != nil {
			return nil, err
		}
		// A context cancelled before its deadline ends the call too.
		stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Now()) })
		defer stop()
	}
	msgs, err := c.conn.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_ACCT<<8 | typ), Flags: flags},
		Data:   data,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, classify(err)
	}
	return msgs, nil
}

// nfgenHeader is the netfilter header every nfnetlink message starts
// with: family AF_UNSPEC, version NFNETLINK_V0, resource id 0.
var nfgenHeader = []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}

// encode is the payload of a request about counter name ("": all).
func encode(name string) ([]byte, error) {
	if name == "" {
		return nfgenHeader, nil
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(attrName, name)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append(append(make([]byte, 0, len(nfgenHeader)+len(attrs)), nfgenHeader...), attrs...), nil
}

// decode reads a counter from the payload of the kernel's NEW message.
func decode(data []byte) (Counter, error) {
	if len(data) < len(nfgenHeader) {
		return Counter{}, errors.New("short message")
	}
	ad, err := netlink.NewAttributeDecoder(data[len(nfgenHeader):])
	if err != nil {
		return Counter{}, err
	}
	ad.ByteOrder = binary.BigEndian
	var c Counter
	var seen int
	for ad.Next() {
		switch ad.Type() {
		case attrName:
			c.Name = ad.String()
			seen |= 1
		case attrPackets:
			c.Packets = ad.Uint64()
			seen |= 2
		case attrBytes:
			c.Bytes = ad.Uint64()
			seen |= 4
		}
	}
	if err := ad.Err(); err != nil {
		return Counter{}, err
	}
	if seen != 7 {
		return Counter{}, errors.New("counter without its name, packets or bytes")
	}
	return c, nil
}

// classify wraps the errors of a kernel without the subsystem: nfnetlink
// answers EINVAL for a subsystem it does not have, and a kernel without
// nfnetlink refuses the socket.
func classify(err error) error {
	for _, errno := range []unix.Errno{unix.EINVAL, unix.EPROTONOSUPPORT, unix.EAFNOSUPPORT, unix.EOPNOTSUPP} {
		if errors.Is(err, errno) {
			return fmt.Errorf("%w: %w", ErrNotSupported, err)
		}
	}
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: %w", ErrNotExist, err)
	}
	return err
}
