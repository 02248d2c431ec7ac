package backend

import (
	"fmt"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/internal/fanout"
	v1 "k8s.io/api/core/v1"
)

// DefaultMasqueradeBit is the masquerade mark bit a zero Config.MasqueradeBit
// means: kube-proxy's default.
const DefaultMasqueradeBit = 14

// Family resolves a Config.Family: "" means IPv4, and only IPv4 and IPv6
// are programmed.
func Family(name string, f v1.IPFamily) (v1.IPFamily, error) {
	switch f {
	case "":
		return v1.IPv4Protocol, nil
	case v1.IPv4Protocol, v1.IPv6Protocol:
		return f, nil
	}
	return f, fmt.Errorf("%s: unknown IP family %q", name, f)
}

// MasqueradeBit resolves a Config.MasqueradeBit: 0 means
// DefaultMasqueradeBit (so bit 0 cannot be chosen), and a fwmark has 32
// bits.
func MasqueradeBit(name string, bit int) (int, error) {
	if bit == 0 {
		return DefaultMasqueradeBit, nil
	}
	if bit < 0 || bit > 31 {
		return bit, fmt.Errorf("%s: masquerade bit %d out of range [0, 31]", name, bit)
	}
	return bit, nil
}

// RenderWorkers checks a Config.RenderWorkers and returns how many
// goroutines a full sync renders on: 0 means GOMAXPROCS, at most 4.
func RenderWorkers(name string, n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("%s: RenderWorkers %d is negative", name, n)
	}
	return fanout.Workers(n), nil
}

// CheckState refuses a State a dataplane of family (resolved by Family)
// cannot program at all: nil, of the other family, or with Settings that
// Settings.Validate refuses (the error wraps its *dataplane.SettingsError).
// A State's "" family is IPv4.
//
// proxykit.New already refuses such Settings; checking them again on each
// State costs little and keeps a value no rule may hold out of every
// dataplane whoever built the State, with an error rather than a rule
// left out.
func CheckState(name string, family v1.IPFamily, s *dataplane.State) error {
	if s == nil {
		return fmt.Errorf("%s: nil State", name)
	}
	fam := s.Family
	if fam == "" {
		fam = v1.IPv4Protocol
	}
	if fam != family {
		return fmt.Errorf("%s: State is %s, dataplane programs %s", name, fam, family)
	}
	if err := s.Settings.Validate(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// LocalInterface returns the interface match of d in a rule, wildcard
// (iptables' "+", nft's "*") ending a prefix: "cbr0", "veth+". ok is false
// when d matches by no interface or names none. It is also false for a
// name that LocalDetector.Validate refuses, which CheckState keeps from
// every sync: so a byte of an unchecked name reaches no rule, whatever the
// caller checked.
func LocalInterface(d dataplane.LocalDetector, wildcard string) (match string, ok bool) {
	switch {
	case d.Interface == "":
		return "", false
	case d.Mode == dataplane.LocalModeBridgeInterface && dataplane.IsInterfaceName(d.Interface) == nil:
		return d.Interface, true
	case d.Mode == dataplane.LocalModeInterfaceNamePrefix && dataplane.IsInterfaceNamePrefix(d.Interface) == nil:
		return d.Interface + wildcard, true
	}
	return "", false
}
