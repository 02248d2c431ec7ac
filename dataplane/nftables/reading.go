package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// Reading is the dataplane's kernel as troubleshooting reads it: its
// table as nft lists it (ParseListing) and, when Others is set, the other
// tables whose base chains run before its nat chain, so that another
// program's table that decides first (kube-proxy's, left behind) is seen.
type Reading struct {
	Rules *Ruleset
	// Others are the ruleset's other tables (ParseOthers); nil reads the
	// dataplane's table alone.
	Others *Others
	// NodeIPs are the node's addresses, which count as local with
	// loopback; State.Node.IPs.
	NodeIPs []netip.Addr
}

// NewReading reads what "nft list table ip|ip6 <table>" printed of the
// dataplane's table of family.
func NewReading(listing []byte, family v1.IPFamily, nodeIPs []netip.Addr) (*Reading, error) {
	rs, err := ParseListing(listing, family)
	if err != nil {
		return nil, err
	}
	return &Reading{Rules: rs, NodeIPs: nodeIPs}, nil
}

// Trace is what the tables do with the first packet of a connection, in
// the shape State.Lookup answers; an error is a form the tracer does not
// follow.
func (k *Reading) Trace(p dataplane.Packet) (dataplane.Verdict, error) {
	v, _, err := k.TraceSteps(p)
	return v, err
}

// TraceSteps is Trace with the chains entered and map elements matched:
// first the other tables' rules that decided something, then the
// dataplane's.
func (k *Reading) TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error) {
	var before []string
	if k.Others != nil {
		v, decided, steps := k.Others.Trace(p, k.NodeIPs)
		if decided {
			return v, steps, nil
		}
		before = steps
	}
	v, steps, err := k.Rules.Trace(p, k.NodeIPs)
	return v, append(before, steps...), err
}

// Services lists the service ports the table holds rules for.
func (k *Reading) Services() []servicemodel.PortName { return k.Rules.Services() }

// ListTable returns table of family as "nft list table" prints it, read
// over netlink in the calling thread's network namespace: no nft binary
// is needed. It returns nil and no error when there is no such table, and
// a *ForeignRuleError when a rule of the table is not one it can print.
// NewReading reads its output.
func ListTable(ctx context.Context, family v1.IPFamily, table string) ([]byte, error) {
	kf := knftables.IPv4Family
	if family == v1.IPv6Protocol {
		kf = knftables.IPv6Family
	}
	c, err := nftnl.Open(kf, table, nftnl.Options{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	b, err := c.ListTable(ctx)
	var re *nftnl.RuleError
	switch {
	case errors.Is(err, syscall.ENOENT):
		return nil, nil
	case errors.As(err, &re):
		return nil, &ForeignRuleError{Family: kf, Table: table, Chain: re.Chain, Handle: re.Handle, Err: re.Err}
	}
	return b, err
}

// ForeignRuleError is a rule ListTable cannot print: its expressions are
// not what nft writes for any rule text this package reads, so it is
// another program's (or was changed by one). "nft list table" prints it.
type ForeignRuleError struct {
	Family       knftables.Family
	Table, Chain string
	Handle       int
	// Err says what could not be read.
	Err error
}

func (e *ForeignRuleError) Error() string {
	return fmt.Sprintf("nftables: rule handle %d of chain %s in table %s %s is not one proxykit can read without nft: %v",
		e.Handle, e.Chain, e.Family, e.Table, e.Err)
}

func (e *ForeignRuleError) Unwrap() error { return e.Err }
