package informer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/proxykit/proxykit/source/validation"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// refusals returns the refusal lines logged so far.
func (l *logLines) refusals() []string {
	var out []string
	for _, s := range l.get() {
		if strings.Contains(s, `"msg"="Refusing an object the API server would refuse"`) {
			out = append(out, s)
		}
	}
	return out
}

func endpointSlice(name string, addrs ...string) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discovery.LabelServiceName: "s"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To(""), Port: ptr.To[int32](8080)}},
	}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{Addresses: []string{a}})
	}
	return es
}

// TestSourceRefusesInvalid: objects no real API server would send are not
// handed on, and are logged with their field errors and counted; the
// others are.
func TestSourceRefusesInvalid(t *testing.T) {
	withService := func(f func(*v1.Service)) runtime.Object {
		s := service("bad", "172.30.0.9", nil)
		f(s)
		return s
	}
	thousand := make([]string, 1001)
	for i := range thousand {
		thousand[i] = "10.0.0.5"
	}
	for _, tc := range []struct {
		name string
		obj  runtime.Object
		kind string
		want string // "" when the object is accepted
	}{
		{"name of 200 characters", withService(func(s *v1.Service) { s.Name = strings.Repeat("s", 200) }), "Service",
			`metadata.name: Invalid value: \"` + strings.Repeat("s", 200) + `\": must be no more than 63 characters`},
		{"port 0", withService(func(s *v1.Service) { s.Spec.Ports[0].Port = 0 }), "Service",
			`spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`},
		{"protocol", withService(func(s *v1.Service) { s.Spec.Ports[0].Protocol = "HTTP" }), "Service",
			`spec.ports[0].protocol: Unsupported value: \"HTTP\"`},
		{"port name of 64 characters", withService(func(s *v1.Service) { s.Spec.Ports[0].Name = strings.Repeat("p", 64) }), "Service",
			`spec.ports[0].name: Invalid value: \"` + strings.Repeat("p", 64) + `\": must be no more than 63 characters`},
		{"label value", withService(func(s *v1.Service) { s.Labels = map[string]string{"app": "a b"} }), "Service",
			`metadata.labels: Invalid value: \"a b\"`},
		{"cluster IP", withService(func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.300", nil }), "Service",
			`spec.clusterIPs[0]: Invalid value: \"172.30.0.300\": must be a valid IP address`},
		{"cluster IP with leading zeros, stored by an older server", withService(func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.030.0.9", nil
		}), "Service", ""},
		{"endpoint on loopback", endpointSlice("bad", "127.0.0.1"), "EndpointSlice",
			`endpoints[0].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)`},
		{"endpoint at the metadata service", endpointSlice("bad", "169.254.169.254"), "EndpointSlice",
			`endpoints[0].addresses[0]: Invalid value: \"169.254.169.254\": may not be in the link-local range (169.254.0.0/16, fe80::/10)`},
		{"endpoint at link-local multicast", endpointSlice("bad", "224.0.0.1"), "EndpointSlice",
			`endpoints[0].addresses[0]: Invalid value: \"224.0.0.1\": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)`},
		{"endpoint unspecified", endpointSlice("bad", "0.0.0.0"), "EndpointSlice",
			`endpoints[0].addresses[0]: Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0)`},
		{"1001 endpoints", endpointSlice("bad", thousand...), "EndpointSlice",
			`endpoints: Too many: 1001: must have at most 1000 items`},
		{"pod CIDR", &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1.NodeSpec{PodCIDRs: []string{"10.244.0.0/40"}}}, "Node",
			`spec.podCIDRs[0]: Invalid value: \"10.244.0.0/40\": must be a valid CIDR value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(service("s", "172.30.0.1", nil), endpointSlice("s-1", "10.0.0.1"),
				&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, tc.obj)
			var log logLines
			reg := prometheus.NewRegistry()
			src := New(client, Config{NodeName: "node-1", Logger: log.logger(), Registerer: reg})
			r := newRecorder()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- src.Run(ctx, r) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			select {
			case <-r.synced:
			case <-time.After(10 * time.Second):
				t.Fatal("never synced")
			}
			want := map[string]bool{"service nil -> ns/s@": true, "slice false -> true": true, "node false -> true": true}
			if tc.want == "" {
				want["service nil -> ns/bad@"] = true
			}
			if diff := cmp.Diff(want, setOf(r.take())); diff != "" {
				t.Errorf("handed on (-want +got):\n%s", diff)
			}
			lines := log.refusals()
			switch {
			case tc.want == "" && len(lines) != 0:
				t.Errorf("refused %q", lines)
			case tc.want != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.want) ||
				!strings.Contains(lines[0], `"source"="informers" "kind"="`+tc.kind+`"`)):
				t.Errorf("logged %q, want one refusal of a %s with %s", lines, tc.kind, tc.want)
			}
			wantCount := 1.0
			if tc.want == "" {
				wantCount = 0
			}
			if got := testutil.ToFloat64(refusedCounter(t, reg, tc.kind)); got != wantCount {
				t.Errorf("refused %s counted %v, want %v", tc.kind, got, wantCount)
			}
		})
	}
}

// refusedCounter is the informers' refusal counter of kind in reg, found
// by registering its twin.
func refusedCounter(t *testing.T, reg *prometheus.Registry, kind string) prometheus.Collector {
	t.Helper()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "proxykit", Name: "source_objects_refused_total",
		Help: "Objects a source refused to hand on because the API server would refuse them (each logged with its field errors), by source and kind.",
	}, []string{"source", "kind"})
	err := reg.Register(vec)
	are, ok := err.(prometheus.AlreadyRegisteredError)
	if !ok {
		t.Fatalf("the source registered no refusal counter (%v)", err)
	}
	return are.ExistingCollector.(*prometheus.CounterVec).WithLabelValues(sourceName, kind)
}

// TestCheckedChanges follows one object through the changes an informer
// hands on: a refused version is absent for the handler.
func TestCheckedChanges(t *testing.T) {
	var log logLines
	c, err := validation.NewChecker(validation.Config{Source: sourceName, Mode: validation.Stored, Logger: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	h := newChecked(r, c)
	version := func(rv string, port int32) *v1.Service {
		s := service("s", "172.30.0.1", nil)
		s.ManagedFields, s.ResourceVersion, s.Spec.Ports[0].Port = nil, rv, port
		return s
	}
	bad1, good2, bad3, good4 := version("1", 0), version("2", 80), version("3", 0), version("4", 81)
	h.OnService(nil, bad1)   // add, refused
	h.OnService(bad1, bad1)  // resync
	h.OnService(bad1, good2) // fixed: an add
	h.OnService(good2, good2)
	h.OnService(good2, bad3) // broken: a delete
	h.OnService(bad3, good4)
	h.OnService(good4, nil)
	h.OnService(nil, bad1)
	h.OnService(bad1, nil) // the delete of a refused object
	want := []string{
		"service nil -> ns/s@2",
		"service ns/s@2 -> ns/s@2",
		"service ns/s@2 -> nil",
		"service nil -> ns/s@4",
		"service ns/s@4 -> nil",
	}
	if diff := cmp.Diff(want, r.take()); diff != "" {
		t.Errorf("handed on (-want +got):\n%s", diff)
	}
	if n := len(log.refusals()); n != 3 {
		t.Errorf("%d refusals logged, want 3 (a resync is not a new refusal): %q", n, log.refusals())
	}
	if len(h.refused) != 0 {
		t.Errorf("refused keys left behind: %v", h.refused)
	}
}

// TestSourceRefusesInvalidServiceCIDR: a ServiceCIDR no API server would
// store is not handed on either.
func TestSourceRefusesInvalidServiceCIDR(t *testing.T) {
	cidr := func(name, c string) *networking.ServiceCIDR {
		return &networking.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networking.ServiceCIDRSpec{CIDRs: []string{c}}}
	}
	client := fake.NewClientset(cidr("kubernetes", "10.96.0.0/16"), cidr("bad", "10.97.0.1/16"))
	var log logLines
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := cidrRecorder{newRecorder()}
	go func() { _ = New(client, Config{Logger: log.logger()}).Run(ctx, r) }()
	var got []string
	for i := 0; i < 1000 && len(got) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
		got = append(got, r.take()...)
	}
	time.Sleep(100 * time.Millisecond) // let a stray second call show up
	got = append(got, r.take()...)
	if diff := cmp.Diff([]string{"servicecidr nil -> kubernetes"}, got); diff != "" {
		t.Errorf("handed on (-want +got):\n%s", diff)
	}
	want := `spec.cidrs[0]: Invalid value: \"10.97.0.1/16\": must not have bits set beyond the prefix length`
	if lines := log.refusals(); len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("logged %q, want one refusal with %s", lines, want)
	}
}
