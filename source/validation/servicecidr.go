package validation

import (
	networking "k8s.io/api/networking/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// ServiceCIDR returns the errors the API server would give sc: what
// ValidateServiceCIDR checks. Its CIDRs have been validated strictly since
// the type exists, so both modes check them so.
func ServiceCIDR(sc *networking.ServiceCIDR, _ Mode) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&sc.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metaPath)
	path := specPath.Child("cidrs")
	cidrs := sc.Spec.CIDRs
	switch {
	case len(cidrs) == 0:
		return append(errs, field.Required(path, "at least one CIDR required"))
	case len(cidrs) > 2:
		return append(errs, field.Invalid(path, sc.Spec, "may only hold up to 2 values"))
	}
	for i, c := range cidrs {
		errs = append(errs, utilvalidation.IsValidCIDR(path.Index(i), c)...)
	}
	if len(cidrs) == 2 {
		f := netutils.IPFamilyOfCIDRString(cidrs[0])
		if f == netutils.IPFamilyOfCIDRString(cidrs[1]) && f != netutils.IPFamilyUnknown {
			errs = append(errs, field.Invalid(path, cidrs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
		}
	}
	return errs
}
