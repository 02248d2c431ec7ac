package validation

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// clusterIPFields checks spec.clusterIPs, spec.ipFamilies and
// spec.ipFamilyPolicy together, as the API server does. Which cluster IPs
// the cluster's service CIDRs allow is the API server's to know; an unset
// policy or family is what it fills in.
func (s *service) clusterIPFields() field.ErrorList {
	if s.typ == v1.ServiceTypeExternalName {
		return nil // typeFields requires them all unset
	}
	var errs field.ErrorList
	spec := &s.Spec
	ipsPath, familiesPath := specPath.Child("clusterIPs"), specPath.Child("ipFamilies")
	if spec.ClusterIP == "" && len(spec.ClusterIPs) != 0 {
		errs = append(errs, field.Invalid(ipsPath, spec.ClusterIPs, "must be empty when `clusterIP` is not specified"))
	} else if spec.ClusterIP != "" && len(spec.ClusterIPs) != 0 && spec.ClusterIPs[0] != spec.ClusterIP {
		errs = append(errs, field.Invalid(ipsPath, spec.ClusterIPs, "first value must match `clusterIP`"))
	}
	seen := make(map[v1.IPFamily]bool, len(spec.IPFamilies))
	for i, f := range spec.IPFamilies {
		if f != v1.IPv4Protocol && f != v1.IPv6Protocol {
			errs = append(errs, field.NotSupported(familiesPath.Index(i), f, supportedFamilies))
		}
		if seen[f] {
			errs = append(errs, field.Duplicate(familiesPath.Index(i), f))
		}
		seen[f] = true
	}
	if p := spec.IPFamilyPolicy; p != nil && *p != v1.IPFamilyPolicySingleStack &&
		*p != v1.IPFamilyPolicyPreferDualStack && *p != v1.IPFamilyPolicyRequireDualStack {
		errs = append(errs, field.NotSupported(specPath.Child("ipFamilyPolicy"), p, supportedFamilyPolicies))
	}
	invalid := false
	for i, ip := range s.clusterIPs {
		if i == 0 && ip == v1.ClusterIPNone {
			if len(s.clusterIPs) > 1 {
				invalid = true
				errs = append(errs, field.Invalid(ipsPath, s.clusterIPs, "'None' must be the first and only value"))
			}
			continue
		}
		ipErrs := legacyIP(ipsPath.Index(i), ip, s.mode)
		invalid = invalid || len(ipErrs) != 0
		errs = append(errs, ipErrs...)
	}
	if len(s.clusterIPs) > 2 {
		errs = append(errs, field.Invalid(ipsPath, s.clusterIPs, "may only hold up to 2 values"))
	}
	// Bad addresses would only skew the checks below.
	if invalid {
		return errs
	}
	return append(errs, s.clusterIPFamilies()...)
}

// clusterIPFamilies checks that valid cluster IPs are one per family and
// of the families ipFamilies gives them.
func (s *service) clusterIPFamilies() field.ErrorList {
	var errs field.ErrorList
	ipsPath := specPath.Child("clusterIPs")
	if len(s.clusterIPs) > 1 {
		if dual, err := netutils.IsDualStackIPStrings(s.clusterIPs); err != nil || !dual {
			errs = append(errs, field.Invalid(ipsPath, s.clusterIPs, "may specify no more than one IP for each IP family"))
		}
	}
	families := s.Spec.IPFamilies
	if s.headless() {
		return errs
	}
	for i, ip := range s.clusterIPs {
		if i >= len(families) {
			break
		}
		switch v6 := netutils.IsIPv6String(ip); {
		case families[i] == v1.IPv4Protocol && v6:
			errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv4 value as indicated by `ipFamilies[%v]`", i)))
		case families[i] == v1.IPv6Protocol && !v6:
			errs = append(errs, field.Invalid(ipsPath.Index(i), ip, fmt.Sprintf("expected an IPv6 value as indicated by `ipFamilies[%v]`", i)))
		}
	}
	return errs
}
