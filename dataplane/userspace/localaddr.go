package userspace

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// LocalAddresses tells which addresses the node holds. A connection from
// one is the node's own traffic, as kube-proxy's rules take any source of
// address type LOCAL to be: under externalTrafficPolicy Local it is served
// from every endpoint, as a pod's is, not only from the local ones.
type LocalAddresses interface {
	// Local reports whether the node holds ip. It is asked for every new
	// connection and UDP session, from many goroutines at once: it must
	// be cheap and safe for concurrent use.
	Local(ip netip.Addr) bool
}

// FakeLocalAddresses is a LocalAddresses holding the addresses Set last
// gave it; the zero value holds none. It is safe for concurrent use.
type FakeLocalAddresses struct {
	mu    sync.RWMutex
	addrs map[netip.Addr]bool
}

// Set replaces the addresses held.
func (f *FakeLocalAddresses) Set(addrs ...netip.Addr) {
	m := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		m[a.Unmap().WithZone("")] = true
	}
	f.mu.Lock()
	f.addrs = m
	f.mu.Unlock()
}

// Local reports whether Set gave ip.
func (f *FakeLocalAddresses) Local(ip netip.Addr) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.addrs[ip.Unmap().WithZone("")]
}

// addrDumpAttempts bounds the dumps of one read while the kernel reports
// each interrupted by a change.
const addrDumpAttempts = 5

// kernelAddresses is the LocalAddresses of a Config without one: the
// addresses of one family that the kernel holds in the network namespace
// it was made in, read again whenever rtnetlink reports one added or
// removed. Reading the whole set again, rather than applying each
// notification, keeps it right after notifications were lost (the
// socket's buffer overflowed: ENOBUFS) and when one address is on two
// links. Lookups read an immutable map, without locks.
type kernelAddresses struct {
	family int
	log    logr.Logger
	// h dumps the addresses; sub receives the notifications. Both are
	// rtnetlink sockets only: a handle of every netlink family fails on
	// a kernel without one of them (xfrm_user, say).
	h     *netlink.Handle
	sub   *nl.NetlinkSocket
	addrs atomic.Pointer[map[netip.Addr]bool]
}

// watchKernelAddresses reads fam's addresses in the calling thread's
// network namespace and follows them until ctx ends, with goroutines wg
// counts. Its sockets are closed then.
func watchKernelAddresses(ctx context.Context, wg *sync.WaitGroup, fam v1.IPFamily, log logr.Logger) (*kernelAddresses, error) {
	family, group := netlink.FAMILY_V4, uint(unix.RTNLGRP_IPV4_IFADDR)
	if fam == v1.IPv6Protocol {
		family, group = netlink.FAMILY_V6, unix.RTNLGRP_IPV6_IFADDR
	}
	// Subscribed before the first dump, so that no change after it is
	// missed.
	sub, err := nl.Subscribe(unix.NETLINK_ROUTE, group)
	if err != nil {
		return nil, fmt.Errorf("subscribe to the node's %s addresses over rtnetlink: %w", fam, err)
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		sub.Close()
		return nil, fmt.Errorf("open rtnetlink: %w", err)
	}
	k := &kernelAddresses{family: family, log: log, h: h, sub: sub}
	if err := k.read(); err != nil {
		sub.Close()
		h.Close()
		return nil, err
	}
	changed := make(chan struct{}, 1)
	wg.Add(2)
	go k.receive(ctx, wg, changed)
	go k.follow(ctx, wg, changed)
	return k, nil
}

// Local reports whether the kernel held ip at the last read.
func (k *kernelAddresses) Local(ip netip.Addr) bool {
	return (*k.addrs.Load())[ip.Unmap().WithZone("")]
}

// read dumps the family's addresses and replaces the set with them. A
// dump a change keeps interrupting leaves the set as it was: that
// change's own notification calls for another read.
func (k *kernelAddresses) read() error {
	var (
		all []netlink.Addr
		err error
	)
	for range addrDumpAttempts {
		if all, err = k.h.AddrList(nil, k.family); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("list the node's addresses: %w", err)
	}
	m := make(map[netip.Addr]bool, len(all))
	for _, a := range all {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			m[ip.Unmap()] = true
		}
	}
	k.addrs.Store(&m)
	return nil
}

// receive signals changed for every notification, and for lost ones,
// until the socket is closed. changed holds one signal, so that a burst of
// changes costs one read.
func (k *kernelAddresses) receive(ctx context.Context, wg *sync.WaitGroup, changed chan<- struct{}) {
	defer wg.Done()
	for {
		_, _, err := k.sub.Receive()
		if ctx.Err() != nil {
			return
		}
		select {
		case changed <- struct{}{}:
		default:
		}
		if err != nil && !errors.Is(err, unix.ENOBUFS) {
			k.log.Error(err, "Cannot follow the node's addresses any more: those of the last read count as the node's own traffic")
			return
		}
	}
}

// follow reads the addresses again after each signal, until ctx ends;
// then it closes both sockets, which ends receive.
func (k *kernelAddresses) follow(ctx context.Context, wg *sync.WaitGroup, changed <-chan struct{}) {
	defer wg.Done()
	defer k.h.Close()
	defer k.sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if err := k.read(); err != nil {
				k.log.Error(err, "Cannot read the node's addresses again: those of the last read count as the node's own traffic")
				continue
			}
			k.log.V(2).Info("Read the node's addresses", "count", len(*k.addrs.Load()))
		}
	}
}

// localAddresses returns what tells the node's addresses for the life
// that starts: Config.LocalAddresses, or the kernel's, followed in the
// calling Sync's network namespace until Cleanup; nil when they cannot be
// read, so that only loopback and the Node's IPs are the node's own.
func (d *Dataplane) localAddresses() LocalAddresses {
	if d.cfg.LocalAddresses != nil {
		return d.cfg.LocalAddresses
	}
	k, err := watchKernelAddresses(d.life, &d.wg, d.cfg.Family, d.log)
	if err != nil {
		d.log.Error(err, "Cannot read the node's addresses: only loopback and the Node's IPs count as the node's own traffic")
		return nil
	}
	return k
}
