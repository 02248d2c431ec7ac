package fuzzobj

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Objects are the API objects one corpus entry feeds its fuzz target, as
// they stand once the target has applied all of them: what a proxy fed the
// same updates would hold.
type Objects struct {
	// Family is the IP family of the target's model.
	Family   v1.IPFamily
	Services []*v1.Service
	Slices   []*discovery.EndpointSlice
}

// NormalizeObjects decodes an entry of servicemodel's FuzzNormalize: its one
// Service.
func NormalizeObjects(e Entry) (Objects, error) {
	in, err := normalizeInput(e)
	if err != nil {
		return Objects{}, err
	}
	return Objects{Family: in.Family(), Services: []*v1.Service{in.Service()}}, nil
}

// ServiceTrackerObjects decodes an entry of servicemodel's FuzzTracker: the
// Services left after its ops, by index. Its model is IPv4.
func ServiceTrackerObjects(e Entry) (Objects, error) {
	a := &args{e: e}
	ops := arg[[]byte](a)
	if err := a.done(); err != nil {
		return Objects{}, err
	}
	var latest [TrackerServices]*v1.Service
	for _, op := range ServiceTracker(ops) {
		if op.Kind != OpCheckout {
			latest[op.Index] = op.New
		}
	}
	out := Objects{Family: v1.IPv4Protocol}
	for _, s := range latest {
		if s != nil {
			out.Services = append(out.Services, s)
		}
	}
	return out, nil
}

// SliceMergeObjects decodes an entry of endpoints' FuzzSliceMerge: the last
// slice of each name, ordered by namespace/name.
func SliceMergeObjects(e Entry) (Objects, error) {
	a := &args{e: e}
	data := arg[[]byte](a)
	if err := a.done(); err != nil {
		return Objects{}, err
	}
	family, fed := SliceMerge(data)
	last := map[types.NamespacedName]*discovery.EndpointSlice{}
	for _, s := range fed {
		last[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	out := Objects{Family: family}
	for _, k := range sortedKeys(last) {
		out.Slices = append(out.Slices, last[k])
	}
	return out, nil
}

// SliceTrackerObjects decodes an entry of endpoints' FuzzTracker: the
// slices stored after its ops.
func SliceTrackerObjects(e Entry) (Objects, error) {
	a := &args{e: e}
	data := arg[[]byte](a)
	if err := a.done(); err != nil {
		return Objects{}, err
	}
	tr := SliceTracker(data)
	return Objects{Family: tr.Family, Slices: tr.Final}, nil
}
