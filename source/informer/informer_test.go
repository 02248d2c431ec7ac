package informer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func service(name, clusterIP string, labels map[string]string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: v1.ServiceSpec{ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, Ports: []v1.ServicePort{{Port: 80}}},
	}
}

func describe(s *v1.Service) string {
	if s == nil {
		return "nil"
	}
	return s.Namespace + "/" + s.Name + "@" + s.ResourceVersion
}

// recorder is a Handler that records every call as a line.
type recorder struct {
	mu     sync.Mutex
	calls  []string
	synced chan struct{}
	once   sync.Once
}

func newRecorder() *recorder { return &recorder{synced: make(chan struct{})} }

func (r *recorder) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, line)
}

func (r *recorder) OnService(old, new *v1.Service) {
	if new != nil && new.ManagedFields != nil {
		r.add("managedFields kept on " + describe(new))
	}
	r.add("service " + describe(old) + " -> " + describe(new))
}

func (r *recorder) OnEndpointSlice(old, new *discovery.EndpointSlice) {
	r.add(fmt.Sprintf("slice %v -> %v", old != nil, new != nil))
}

func (r *recorder) OnNode(old, new *v1.Node) {
	r.add(fmt.Sprintf("node %v -> %v", old != nil, new != nil))
}

func (r *recorder) Synced() { r.once.Do(func() { close(r.synced) }) }

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// TestSource runs the source against client-go's fake clientset: the
// initial objects arrive before Synced (without managedFields), a service
// claimed by another proxy does not, and a later delete is delivered. (The
// fake applies label selectors but not field selectors.)
func TestSource(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	slice := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s-1"}, AddressType: discovery.AddressTypeIPv4}
	client := fake.NewClientset(
		service("s", "172.30.0.1", nil),
		service("claimed", "172.30.0.2", map[string]string{labelServiceProxyName: "someone-else"}),
		slice, node,
	)
	ctx, cancel := context.WithCancel(context.Background())
	r := newRecorder()
	done := make(chan error, 1)
	go func() { done <- New(client, Config{NodeName: "node-1", Logger: testr.New(t)}).Run(ctx, r) }()
	select {
	case <-r.synced:
	case <-time.After(10 * time.Second):
		t.Fatal("never synced")
	}
	got := r.take()
	want := map[string]bool{"service nil -> ns/s@": true, "slice false -> true": true, "node false -> true": true}
	if diff := cmp.Diff(want, setOf(got)); diff != "" || len(got) != len(want) {
		t.Errorf("initial calls %v (-want +got):\n%s", got, diff)
	}

	if err := client.CoreV1().Services("ns").Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got = nil
	for i := 0; i < 1000 && len(got) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
		got = r.take()
	}
	if diff := cmp.Diff([]string{"service ns/s@ -> nil"}, got); diff != "" {
		t.Errorf("after delete (-want +got):\n%s", diff)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

func setOf(lines []string) map[string]bool {
	out := map[string]bool{}
	for _, l := range lines {
		out[l] = true
	}
	return out
}

func TestServiceMergerMove(t *testing.T) {
	r := newRecorder()
	m := newServiceMerger(r)
	a := service("s", "172.30.0.1", nil)
	b := a.DeepCopy()
	b.ResourceVersion = "2"
	b.ManagedFields = nil
	a.ManagedFields = nil
	// The service moves from informer 0 to 1; 1's add arrives first.
	m.apply(0, nil, a)
	m.apply(1, nil, b)
	m.apply(0, a, nil)
	// Then it is deleted for good.
	m.apply(1, b, nil)
	want := []string{"service nil -> ns/s@", "service ns/s@ -> ns/s@2", "service ns/s@2 -> ns/s@2", "service ns/s@2 -> nil"}
	if diff := cmp.Diff(want, r.take()); diff != "" {
		t.Errorf("forwarded (-want +got):\n%s", diff)
	}
}

func TestTypedHandlerTombstones(t *testing.T) {
	var got []string
	h := typedHandler(testr.New(t), func(old, new *v1.Service) {
		got = append(got, describe(old)+" -> "+describe(new))
	})
	svc := service("s", "172.30.0.1", nil)
	h.OnAdd(svc, false)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/s", Obj: svc})
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: "not a service"})
	h.OnAdd(&v1.Node{}, false)
	want := []string{"nil -> ns/s@", "ns/s@ -> nil"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}
