package source

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// recorder is a Handler that records each call as a line.
type recorder struct{ calls []string }

func name[T any, P interface {
	*T
	metav1.Object
}](o P) string {
	if o == nil {
		return "nil"
	}
	return o.GetName()
}

func (r *recorder) OnService(old, new *v1.Service) {
	r.calls = append(r.calls, "service "+name(old)+" -> "+name(new))
}

func (r *recorder) OnEndpointSlice(old, new *discovery.EndpointSlice) {
	r.calls = append(r.calls, "slice "+name(old)+" -> "+name(new))
}

func (r *recorder) OnNode(old, new *v1.Node) {
	r.calls = append(r.calls, "node "+name(old)+" -> "+name(new))
}

func (r *recorder) Synced() { r.calls = append(r.calls, "synced") }

// cidrRecorder also takes ServiceCIDRs.
type cidrRecorder struct{ recorder }

func (r *cidrRecorder) OnServiceCIDR(old, new *networking.ServiceCIDR) {
	r.calls = append(r.calls, "servicecidr "+name(old)+" -> "+name(new))
}

// TestDeliverServiceCIDR: ServiceCIDRs reach only a Handler that takes
// them, and Static accepts them.
func TestDeliverServiceCIDR(t *testing.T) {
	cidr := &networking.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	plain, wants := &recorder{}, &cidrRecorder{}
	for _, h := range []Handler{plain, wants} {
		Deliver(h, nil, cidr)
		Deliver(h, cidr, nil)
	}
	if len(plain.calls) != 0 {
		t.Errorf("a Handler without OnServiceCIDR got %v", plain.calls)
	}
	if diff := cmp.Diff([]string{"servicecidr nil -> c", "servicecidr c -> nil"}, wants.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &cidrRecorder{}
	if err := (Static{cidr}).Run(ctx, r); err != nil {
		t.Fatalf("Static with a ServiceCIDR: %v", err)
	}
	if diff := cmp.Diff([]string{"servicecidr nil -> c", "synced"}, r.calls); diff != "" {
		t.Errorf("Static calls (-want +got):\n%s", diff)
	}
}

func TestDeliver(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	slice := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "e"}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	r := &recorder{}
	for _, c := range [][2]runtime.Object{
		{nil, svc}, {svc, svc}, {svc, nil},
		{nil, slice}, {slice, nil},
		{nil, node}, {node, nil},
		{nil, &v1.Pod{}}, // not a proxy's kind: ignored
	} {
		Deliver(r, c[0], c[1])
	}
	want := []string{
		"service nil -> s", "service s -> s", "service s -> nil",
		"slice nil -> e", "slice e -> nil",
		"node nil -> n", "node n -> nil",
	}
	if diff := cmp.Diff(want, r.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestStaticRejectsOtherKinds(t *testing.T) {
	r := &recorder{}
	src := Static{&v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}
	err := src.Run(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "*v1.Pod p") {
		t.Errorf("Run = %v, want an error naming *v1.Pod p", err)
	}
	if len(r.calls) != 0 {
		t.Errorf("delivered %v before failing, want nothing", r.calls)
	}
}

func TestFunc(t *testing.T) {
	r := &recorder{}
	var src Source = Func(func(_ context.Context, h Handler) error { h.Synced(); return nil })
	if err := src.Run(context.Background(), r); err != nil || len(r.calls) != 1 {
		t.Errorf("Run = %v, calls %v", err, r.calls)
	}
}
