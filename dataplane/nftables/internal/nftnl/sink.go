package nftnl

import (
	"context"
	"fmt"

	"sigs.k8s.io/knftables"
)

// Sink encodes transactions exactly as a Conn sends them and hands each
// batch to a function instead of a socket: the userspace cost of Run
// without a kernel. Its methods are safe for concurrent use.
type Sink struct {
	c    *Conn
	send func(batch []byte) error
}

// NewSink returns a Sink for table in family (knftables.IPv4Family or
// IPv6Family). send stands for the kernel: it gets each batch, valid only
// during the call, and its error refuses the whole transaction. The
// elements of a set no transaction of the Sink defined cannot be encoded:
// there is no kernel to ask for its type.
func NewSink(family knftables.Family, table string, send func(batch []byte) error) (*Sink, error) {
	c, err := newConn(family, table)
	if err != nil {
		return nil, err
	}
	return &Sink{c: c, send: send}, nil
}

// Run encodes ops as Conn.Run would and hands the batch to send.
func (s *Sink) Run(ctx context.Context, ops []Op) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b := c.newBatch()
	if err := b.encode(ctx, ops); err != nil {
		return err
	}
	if err := s.send(b.w.b); err != nil {
		return fmt.Errorf("nftnl: transaction of %d operations: %w", len(ops), err)
	}
	b.commit()
	return nil
}
