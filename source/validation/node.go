package validation

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

var supportedTaintEffects = []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute}

// taintKey prints a duplicate taint as the API server's own Taint type
// does in its message (see servicePortKey).
type taintKey struct {
	Key       string
	Value     string
	Effect    v1.TaintEffect
	TimeAdded *metav1.Time
}

// Node returns the errors the API server would give node in what a proxy
// reads of it: its metadata (name, labels such as its zone, annotations),
// spec.podCIDRs and spec.taints. Its status (addresses included, which
// the API server does not check either) and resources are not checked.
func Node(node *v1.Node, mode Mode) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&node.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, metaPath)
	// The API server places taints under metadata in its messages.
	errs = append(errs, taints(node.Spec.Taints, metaPath.Child("taints"))...)
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 {
		return errs
	}
	path := specPath.Child("podCIDRs")
	invalid := false
	for i, c := range cidrs {
		cidrErrs := legacyCIDR(path.Index(i), c, mode)
		invalid = invalid || len(cidrErrs) != 0
		errs = append(errs, cidrErrs...)
	}
	if len(cidrs) > 1 && !invalid {
		if dual, err := netutils.IsDualStackCIDRStrings(cidrs); err != nil || !dual || len(cidrs) > 2 {
			errs = append(errs, field.Invalid(path, cidrs, "may specify no more than one CIDR for each IP family"))
		}
	}
	return errs
}

func taints(list []v1.Taint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[v1.TaintEffect]map[string]bool)
	for i := range list {
		t := &list[i]
		idx := path.Index(i)
		errs = append(errs, metavalidation.ValidateLabelName(t.Key, idx.Child("key"))...)
		if msgs := utilvalidation.IsValidLabelValue(t.Value); len(msgs) != 0 {
			errs = append(errs, field.Invalid(idx.Child("value"), t.Value, strings.Join(msgs, ";")))
		}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		case "":
			errs = append(errs, field.Required(idx.Child("effect"), ""))
		default:
			errs = append(errs, field.NotSupported(idx.Child("effect"), t.Effect, supportedTaintEffects))
		}
		if seen[t.Effect][t.Key] {
			dup := field.Duplicate(idx, taintKey{Key: t.Key, Value: t.Value, Effect: t.Effect, TimeAdded: t.TimeAdded})
			dup.Detail = "taints must be unique by key and effect pair"
			errs = append(errs, dup)
			continue
		}
		if seen[t.Effect] == nil {
			seen[t.Effect] = map[string]bool{}
		}
		seen[t.Effect][t.Key] = true
	}
	return errs
}
