package fuzzobj

import (
	"fmt"
	"path/filepath"

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

// Decoded is one entry of a model fuzz corpus, decoded.
type Decoded struct {
	// Name is "pkg.Target/file", for messages.
	Name string
	Objects
}

// modelCorpus is one of the model's fuzz targets whose corpus
// ModelCorpora decodes.
type modelCorpus struct {
	pkg, target string
	decode      func(Entry) (Objects, error)
}

func modelCorpora() []modelCorpus {
	return []modelCorpus{
		{"servicemodel", "FuzzNormalize", NormalizeObjects},
		{"servicemodel", "FuzzTracker", ServiceTrackerObjects},
		{"endpoints", "FuzzSliceMerge", SliceMergeObjects},
		{"endpoints", "FuzzTracker", SliceTrackerObjects},
	}
}

func (c modelCorpus) dir() string { return filepath.Join(c.pkg, "testdata/fuzz", c.target) }

// ModelCorpusDirs are the corpus directories ModelCorpora reads, relative
// to the repository root: what a replay running elsewhere (in a test VM)
// must be given.
func ModelCorpusDirs() []string {
	var dirs []string
	for _, c := range modelCorpora() {
		dirs = append(dirs, c.dir())
	}
	return dirs
}

// ModelCorpora decodes every checked-in entry of the model's fuzz corpora
// (servicemodel's and endpoints' targets) under the repository root: the
// bad objects the fuzzers found interesting, which every dataplane replays
// into a kernel. An empty corpus is an error: a replay of nothing proves
// nothing.
func ModelCorpora(root string) ([]Decoded, error) {
	var out []Decoded
	for _, c := range modelCorpora() {
		entries, err := ReadCorpus(filepath.Join(root, c.dir()))
		if err != nil {
			return nil, err
		}
		if len(entries) == 0 {
			return nil, fmt.Errorf("%s.%s: empty corpus", c.pkg, c.target)
		}
		for _, e := range entries {
			objs, err := c.decode(e)
			if err != nil {
				return nil, fmt.Errorf("%s.%s/%s: %w", c.pkg, c.target, e.Name, err)
			}
			out = append(out, Decoded{Name: c.pkg + "." + c.target + "/" + e.Name, Objects: objs})
		}
	}
	return out, nil
}
