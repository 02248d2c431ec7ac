package dataplane

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/proxykit/proxykit/internal/logtext"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxInterfaceName is the most bytes of a Linux interface name: IFNAMSIZ
// less the terminating NUL.
const MaxInterfaceName = 15

// IsInterfaceName returns why name cannot be the LocalDetector.Interface
// of LocalModeBridgeInterface, or nil when it can, as apimachinery's
// validation.Is* functions do: 1 to MaxInterfaceName bytes of ASCII
// letters, digits, '-', '_' and '.', and not "." or "..".
//
// Linux itself refuses only '/', ':', whitespace and names of "." and
// "..": the other bytes it accepts either mean something in the rules the
// name is written into (a quote, '\', '#', '!', iptables' '+' and nft's
// '*' wildcards) or are control characters, and no bridge a CNI plugin
// makes uses one. kube-proxy checks only that the name is not empty.
func IsInterfaceName(name string) []string {
	msgs := IsInterfaceNamePrefix(name)
	if name == "." || name == ".." {
		msgs = append(msgs, `must not be "." or ".."`)
	}
	return msgs
}

// IsInterfaceNamePrefix returns why prefix cannot be the
// LocalDetector.Interface of LocalModeInterfaceNamePrefix, or nil when it
// can: IsInterfaceName's rules, except that "." and "..", which no
// interface is named, still begin names an interface may have.
func IsInterfaceNamePrefix(prefix string) []string {
	var msgs []string
	if prefix == "" {
		return append(msgs, "must not be empty")
	}
	if len(prefix) > MaxInterfaceName {
		msgs = append(msgs, fmt.Sprintf("must be no more than %d bytes (Linux's interface name limit)", MaxInterfaceName))
	}
	if i := strings.IndexFunc(prefix, notInterfaceRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(prefix[i:])
		msgs = append(msgs, fmt.Sprintf("must consist of ASCII letters, digits, '-', '_' and '.' (found %q)", r))
	}
	return msgs
}

func notInterfaceRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
}

// SettingsError is the error of Settings.Validate and
// LocalDetector.Validate: every value they refuse, each a *field.Error
// whose Field is its Go path ("Settings.LocalDetector.Interface") and
// whose BadValue is the value given (cut, when huge, as log lines cut
// user-supplied strings). errors.As finds the first *field.Error too.
type SettingsError struct {
	Errs field.ErrorList
}

func (e *SettingsError) Error() string { return e.Errs.ToAggregate().Error() }

// Unwrap returns each *field.Error.
func (e *SettingsError) Unwrap() []error {
	errs := make([]error, len(e.Errs))
	for i, fe := range e.Errs {
		errs[i] = fe
	}
	return errs
}

// Validate refuses the values of s that no dataplane may write into a
// rule: the local-traffic detector's (see LocalDetector.Validate) and
// NodePortAddresses that are not valid prefixes (the zero netip.Prefix)
// or are IPv4-mapped IPv6 ones, which match no packet of either family.
// It returns nil or a *SettingsError.
//
// proxykit.New refuses Settings it refuses, and every dataplane of this
// module refuses to program, render or repair a State whose Settings it
// refuses, so that a bad value fails at start-up instead of being left
// out of the rules.
func (s Settings) Validate() error {
	return asError(s.validate(field.NewPath("Settings")))
}

// Validate refuses a detector no dataplane can program: an unknown Mode,
// a CIDR that is not a valid prefix (or is an IPv4-mapped IPv6 one), or
// an Interface that IsInterfaceName (BridgeInterface) or
// IsInterfaceNamePrefix (InterfaceNamePrefix) refuses; an empty
// Interface stays valid and detects nothing. It returns nil or a
// *SettingsError whose paths begin with "LocalDetector".
func (d LocalDetector) Validate() error {
	return asError(d.validate(field.NewPath("LocalDetector")))
}

func asError(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return &SettingsError{Errs: errs}
}

func (s Settings) validate(p *field.Path) field.ErrorList {
	errs := s.LocalDetector.validate(p.Child("LocalDetector"))
	return append(errs, validatePrefixes(s.NodePortAddresses, p.Child("NodePortAddresses"))...)
}

func (d LocalDetector) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := IsInterfaceName
	switch d.Mode {
	case LocalModeNone, LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeBridgeInterface:
	case LocalModeInterfaceNamePrefix:
		check = IsInterfaceNamePrefix
	default:
		errs = append(errs, field.NotSupported(p.Child("Mode"), logtext.String(string(d.Mode)),
			[]LocalMode{LocalModeNone, LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeBridgeInterface, LocalModeInterfaceNamePrefix}))
	}
	if d.Interface != "" {
		for _, msg := range check(d.Interface) {
			errs = append(errs, field.Invalid(p.Child("Interface"), logtext.String(d.Interface), msg))
		}
	}
	return append(errs, validatePrefixes(d.CIDRs, p.Child("CIDRs"))...)
}

// mappedPrefix says why an IPv4-mapped IPv6 prefix is refused.
const mappedPrefix = "must not be an IPv4-mapped IPv6 CIDR: give the IPv4 CIDR"

func validatePrefixes(list []netip.Prefix, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, pfx := range list {
		switch {
		case !pfx.IsValid():
			errs = append(errs, field.Invalid(p.Index(i), pfx.String(), "must be a valid CIDR"))
		case pfx.Addr().Is4In6():
			errs = append(errs, field.Invalid(p.Index(i), pfx.String(), mappedPrefix))
		}
	}
	return errs
}
