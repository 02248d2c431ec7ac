package conntrack

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// MaxAttempts is how many times one Clean dumps the table when the kernel
// keeps reporting the dump interrupted, matching kube-proxy's EINTR retry.
const MaxAttempts = 5

// Netlink is the part of the netlink API a Cleaner uses. *netlink.Handle
// implements it (netlink.NewHandleAt gives one bound to another network
// namespace), and so does *FakeTable.
type Netlink interface {
	// ConntrackDeleteFilters dumps the family's table and deletes every
	// flow that a filter matches, returning how many it deleted. It
	// returns netlink.ErrDumpInterrupted, with the count of what it did
	// delete, when the table changed during the dump.
	ConntrackDeleteFilters(table netlink.ConntrackTableType, family netlink.InetFamily, filters ...netlink.CustomConntrackFilter) (uint, error)
}

// Config configures a Cleaner. The zero value cleans the tables of the
// network namespace of whichever thread calls CleanStale, logging through
// klog.
type Config struct {
	// Netlink talks to the kernel; nil means a netlink handle that opens
	// its socket in the calling thread's network namespace.
	Netlink Netlink
	// Logger receives skipped items and, at V(5), every deleted flow; the
	// zero value logs nothing.
	Logger logr.Logger
	// OnSkip, if set, is called once per skipped stale item with a short,
	// bounded reason (for a metric label).
	OnSkip func(reason string)
}

// Cleaner deletes stale UDP and SCTP conntrack entries. Its methods may be
// called from any goroutine.
type Cleaner struct {
	nl     Netlink
	log    logr.Logger
	onSkip func(string)
}

// New returns a Cleaner for cfg.
func New(cfg Config) *Cleaner {
	c := &Cleaner{nl: cfg.Netlink, log: cfg.Logger, onSkip: cfg.OnSkip}
	if c.nl == nil {
		c.nl = &netlink.Handle{}
	}
	return c
}

// ErrInvalidFamily is wrapped by CleanStale's error for a StaleFlows.Family other
// than "", IPv4 and IPv6.
var ErrInvalidFamily = errors.New("conntrack: invalid IP family")

// Error is what CleanStale returns when the kernel refused a dump or a
// delete. Unwrap gives the netlink error: errors.Is(err,
// netlink.ErrDumpInterrupted) tells a table too busy to dump consistently
// (worth retrying soon) from a failure.
type Error struct {
	Family v1.IPFamily
	// Deleted is how many entries were deleted before the failure.
	Deleted int
	Err     error
}

func (e *Error) Error() string {
	return fmt.Sprintf("conntrack: cleaning %s table (%d entries deleted): %v%s", e.Family, e.Deleted, e.Err, moduleHint(e.Err))
}

// moduleHint names the module a kernel that answers a conntrack request
// with err probably lacks: nfnetlink refuses requests to its conntrack
// subsystem with EINVAL while nf_conntrack_netlink is not loaded, and a
// kernel without nfnetlink has no netfilter netlink socket at all.
func moduleHint(err error) string {
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPROTONOSUPPORT) {
		return " (what a kernel without nf_conntrack_netlink answers; load it with modprobe nf_conntrack_netlink)"
	}
	return ""
}

func (e *Error) Unwrap() error { return e.Err }

// CleanStale deletes the flows that s makes stale and returns how many it
// deleted. Items that cannot be matched (TCP, another family, invalid
// addresses or ports) are skipped and reported through Config.OnSkip; with
// nothing left to match, CleanStale does not touch the kernel.
func (c *Cleaner) CleanStale(ctx context.Context, s dataplane.StaleFlows) (int, error) {
	var inet netlink.InetFamily
	switch s.Family {
	case "":
		s.Family = v1.IPv4Protocol
		inet = unix.AF_INET
	case v1.IPv4Protocol:
		inet = unix.AF_INET
	case v1.IPv6Protocol:
		inet = unix.AF_INET6
	default:
		return 0, fmt.Errorf("%w %q", ErrInvalidFamily, s.Family)
	}
	log := c.log.WithValues("ipFamily", s.Family)
	f := c.newFilter(log, s)
	if f.empty() {
		return 0, nil
	}
	deleted := 0
	var err error
	for attempt := 1; attempt <= MaxAttempts; attempt++ {
		if ctxErr := ctx.Err(); ctxErr != nil {
			if err == nil {
				err = ctxErr
			}
			break
		}
		var n uint
		n, err = c.nl.ConntrackDeleteFilters(netlink.ConntrackTable, inet, f)
		deleted += int(n)
		if err == nil || !errors.Is(err, unix.EINTR) {
			break
		}
		log.V(4).Info("Conntrack dump interrupted, retrying", "attempt", attempt, "deleted", deleted)
	}
	if err != nil {
		return deleted, &Error{Family: s.Family, Deleted: deleted, Err: err}
	}
	log.V(4).Info("Deleted stale conntrack entries", "deleted", deleted,
		"frontends", len(s.Frontends), "endpoints", len(s.Endpoints), "ports", len(s.Ports))
	return deleted, nil
}

func (c *Cleaner) skip(log logr.Logger, reason string, kv ...any) {
	log.V(2).Info("Skipping stale item", append([]any{"reason", reason}, kv...)...)
	if c.onSkip != nil {
		c.onSkip(reason)
	}
}
