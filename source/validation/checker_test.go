package validation

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestChecker(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	reg := prometheus.NewPedanticRegistry()
	c, err := NewChecker(Config{Source: "manifests", Logger: log, Registerer: reg, MetricsNamespace: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// A second source shares the counter.
	other, err := NewChecker(Config{Source: "informers", Mode: Stored, Registerer: reg, MetricsNamespace: "test"})
	if err != nil {
		t.Fatal(err)
	}

	bad := validSlice()
	bad.Endpoints[0].Addresses[0] = "127.0.0.1"
	for _, o := range []runtime.Object{validService(), validSlice(), validNode(), bad} {
		if err := c.Check(o, "path", "svc.yaml", "line", 7); (err != nil) != (o == bad) {
			t.Errorf("Check(%T) = %v", o, err)
		}
	}
	if err := other.Check(bad); err == nil {
		t.Error("Check(bad) = nil for the informers")
	}

	want := []string{`"msg"="Refusing an object the API server would refuse" ` +
		`"error"="EndpointSlice.discovery.k8s.io \"web-abcde\" is invalid: endpoints[0].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)" ` +
		`"source"="manifests" "kind"="EndpointSlice" "object"={"name"="web-abcde" "namespace"="ns"} "path"="svc.yaml" "line"=7`}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
	const metrics = `
# HELP test_source_objects_refused_total Objects a source refused to hand on because the API server would refuse them (each logged with its field errors), by source and kind.
# TYPE test_source_objects_refused_total counter
test_source_objects_refused_total{kind="EndpointSlice",source="informers"} 1
test_source_objects_refused_total{kind="EndpointSlice",source="manifests"} 1
test_source_objects_refused_total{kind="Node",source="informers"} 0
test_source_objects_refused_total{kind="Node",source="manifests"} 0
test_source_objects_refused_total{kind="Service",source="informers"} 0
test_source_objects_refused_total{kind="Service",source="manifests"} 0
test_source_objects_refused_total{kind="ServiceCIDR",source="informers"} 0
test_source_objects_refused_total{kind="ServiceCIDR",source="manifests"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(metrics)); err != nil {
		t.Error(err)
	}
}

func TestCheckerRegistrationConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "proxykit_source_objects_refused_total", Help: "other"}))
	if _, err := NewChecker(Config{Source: "manifests", Registerer: reg}); err == nil {
		t.Error("NewChecker registered over a conflicting collector")
	}
}
