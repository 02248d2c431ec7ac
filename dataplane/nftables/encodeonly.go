package nftables

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// NewEncodeOnly returns a Dataplane that runs exactly what New's does with
// cfg.NFT nil, except the kernel: it opens no socket, and each transaction
// is encoded into the netlink batch New's would send, byte for byte, and
// handed to send instead, valid only during the call. send's error refuses
// the transaction as the kernel would, and its size is len(batch). It
// measures the dataplane's own cost on the default path without a kernel
// (proxykit's benchmark does). cfg.NFT must be nil.
//
// The table it reads back holds the chains, sets and maps it created, but
// no rules and no elements: a full sync rewrites every rule and element,
// as after a failure every full sync of kube-proxy does.
func NewEncodeOnly(cfg Config, send func(batch []byte) error) (*Dataplane, error) {
	if cfg.NFT != nil {
		return nil, errors.New("nftables: NewEncodeOnly encodes for netlink: Config.NFT must be nil")
	}
	if send == nil {
		return nil, errors.New("nftables: NewEncodeOnly needs a send function")
	}
	d, err := newDataplane(cfg)
	if err != nil {
		return nil, err
	}
	sink, err := nftnl.NewSink(d.family(), d.cfg.Table, send)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	d.kernel = &encodeKernel{sink: sink, names: map[string]map[string]bool{"chain": {}, "set": {}, "map": {}}}
	return d, nil
}

// encodeKernel is the kernel of NewEncodeOnly: transactions go to a Sink,
// and listings show the names of what they created.
type encodeKernel struct {
	sink *nftnl.Sink
	// table is whether the table exists; names holds its chains, sets
	// and maps by kind.
	table bool
	names map[string]map[string]bool
}

func (k *encodeKernel) Run(ctx context.Context, ops []nftnl.Op) error {
	if err := k.sink.Run(ctx, ops); err != nil {
		return err
	}
	for _, o := range ops {
		var kind, name string
		switch obj := o.Obj.(type) {
		case *knftables.Table:
			switch o.Verb {
			case verbAdd:
				k.table = true
			case verbDelete:
				k.table = false
				for _, n := range k.names {
					clear(n)
				}
			}
			continue
		case *knftables.Chain:
			kind, name = "chain", obj.Name
		case *knftables.Set:
			kind, name = "set", obj.Name
		case *knftables.Map:
			kind, name = "map", obj.Name
		default:
			continue
		}
		switch o.Verb {
		case verbAdd:
			k.names[kind][name] = true
		case verbDelete:
			delete(k.names[kind], name)
		}
	}
	return nil
}

func (k *encodeKernel) ListAll(ctx context.Context) (map[string][]string, error) {
	if !k.table {
		return nil, syscall.ENOENT
	}
	all := make(map[string][]string, len(k.names))
	for kind, names := range k.names {
		all[kind] = slices.Sorted(maps.Keys(names))
	}
	return all, nil
}

func (k *encodeKernel) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	return nil, nil
}

func (k *encodeKernel) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	return nil, nil
}
