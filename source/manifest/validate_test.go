package manifest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// refusalLog collects the lines of a funcr logger.
type refusalLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *refusalLog) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// refusals returns the refusal lines logged so far.
func (l *refusalLog) refusals() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, `"msg"="Refusing an object the API server would refuse"`) {
			out = append(out, s)
		}
	}
	return out
}

// refusedObjects reads proxykit_source_objects_refused_total by kind.
func refusedObjects(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	return counterBy(t, reg, "proxykit_source_objects_refused_total", "kind")
}

// badService is a Service document named "bad" with the given spec (and
// metadata lines, indented by two).
func badService(meta, spec string) string {
	return "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\n  namespace: demo\n" + meta + "spec:\n" + spec
}

func badSlice(meta, body string) string {
	return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: bad\n  namespace: demo\n" + meta +
		"addressType: IPv4\nports:\n- name: http\n  port: 8080\n" + body
}

func endpointsAt(addrs ...string) string {
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "- addresses: [%q]\n", a)
	}
	return b.String()
}

const port80 = "  clusterIP: 172.30.0.9\n  ports:\n  - port: 80\n"

// invalidCases are objects the API server refuses, each with the kind
// counted and the field error it must be refused with.
var invalidCases = []struct {
	name, doc, kind, want string
}{
	{"service name of 64 characters", strings.Replace(badService("", port80), "name: bad", "name: "+strings.Repeat("s", 64), 1), "Service",
		`metadata.name: Invalid value: \"` + strings.Repeat("s", 64) + `\": must be no more than 63 characters`},
	{"service name of 200 characters", strings.Replace(badService("", port80), "name: bad", "name: "+strings.Repeat("s", 200), 1), "Service",
		`metadata.name: Invalid value: \"` + strings.Repeat("s", 200) + `\": must be no more than 63 characters`},
	{"service name with upper case", strings.Replace(badService("", port80), "name: bad", "name: Bad", 1), "Service",
		`metadata.name: Invalid value: \"Bad\": a lowercase RFC 1123 label must consist of`},
	{"namespace of 64 characters", strings.Replace(badService("", port80), "namespace: demo", "namespace: "+strings.Repeat("n", 64), 1), "Service",
		`metadata.namespace: Invalid value: \"` + strings.Repeat("n", 64) + `\": must be no more than 63 characters`},
	{"label value", badService("  labels:\n    app: \"a b\"\n", port80), "Service",
		`metadata.labels: Invalid value: \"a b\": a valid label must be an empty string or consist of`},
	{"label value of 64 characters", badService("  labels:\n    app: "+strings.Repeat("v", 64)+"\n", port80), "Service",
		`metadata.labels: Invalid value: \"` + strings.Repeat("v", 64) + `\": must be no more than 63 bytes`},
	{"label key", badService("  labels:\n    \"a b\": x\n", port80), "Service",
		`metadata.labels: Invalid value: \"a b\": name part must consist of`},
	{"annotations over 256 KiB", badService("  annotations:\n    a: "+strings.Repeat("x", 256<<10)+"\n", port80), "Service",
		`metadata.annotations: Too long: may not be more than 262144 bytes`},
	{"port 0", badService("", "  ports:\n  - port: 0\n"), "Service",
		`spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`},
	{"port 65536", badService("", "  ports:\n  - port: 65536\n"), "Service",
		`spec.ports[0].port: Invalid value: 65536: must be between 1 and 65535, inclusive`},
	{"no ports", badService("", "  clusterIP: 172.30.0.9\n"), "Service", `spec.ports: Required value`},
	{"protocol", badService("", "  ports:\n  - port: 80\n    protocol: HTTP\n"), "Service",
		`spec.ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"`},
	{"lower-case protocol", badService("", "  ports:\n  - port: 80\n    protocol: tcp\n"), "Service",
		`spec.ports[0].protocol: Unsupported value: \"tcp\": supported values: \"SCTP\", \"TCP\", \"UDP\"`},
	{"duplicate port", badService("", "  ports:\n  - name: a\n    port: 80\n  - name: b\n    port: 80\n"), "Service",
		`spec.ports[1]: Duplicate value: {\"Name\":\"\",\"Protocol\":\"TCP\",\"AppProtocol\":null,\"Port\":80,\"TargetPort\":0,\"NodePort\":0}`},
	{"duplicate port name", badService("", "  ports:\n  - name: a\n    port: 80\n  - name: a\n    port: 81\n"), "Service",
		`spec.ports[1].name: Duplicate value: \"a\"`},
	{"unnamed port among several", badService("", "  ports:\n  - name: a\n    port: 80\n  - port: 81\n"), "Service",
		`spec.ports[1].name: Required value`},
	{"port name with upper case", badService("", "  ports:\n  - name: HTTP\n    port: 80\n"), "Service",
		`spec.ports[0].name: Invalid value: \"HTTP\": a lowercase RFC 1123 label must consist of`},
	{"port name of 64 characters", badService("", "  ports:\n  - name: "+strings.Repeat("p", 64)+"\n    port: 80\n"), "Service",
		`spec.ports[0].name: Invalid value: \"` + strings.Repeat("p", 64) + `\": must be no more than 63 characters`},
	{"target port name of 16 characters", badService("", "  ports:\n  - port: 80\n    targetPort: abcdefghijklmnop\n"), "Service",
		`spec.ports[0].targetPort: Invalid value: \"abcdefghijklmnop\": must be no more than 15 characters`},
	{"cluster IP", badService("", "  clusterIP: 172.30.0.300\n  ports:\n  - port: 80\n"), "Service",
		`spec.clusterIPs[0]: Invalid value: \"172.30.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`},
	{"cluster IP with leading zeros", badService("", "  clusterIP: 172.030.0.9\n  ports:\n  - port: 80\n"), "Service",
		`spec.clusterIPs[0]: Invalid value: \"172.030.0.9\": must not have leading 0s`},
	{"cluster IPs of one family", badService("", "  clusterIP: 172.30.0.9\n  clusterIPs: [172.30.0.9, 172.30.0.10]\n  ports:\n  - port: 80\n"), "Service",
		`spec.clusterIPs: Invalid value: [\"172.30.0.9\",\"172.30.0.10\"]: may specify no more than one IP for each IP family`},
	{"external IP on loopback", badService("", port80+"  externalIPs: [127.0.0.1]\n"), "Service",
		`spec.externalIPs[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)`},
	{"source range", badService("", port80+"  type: LoadBalancer\n  loadBalancerSourceRanges: [10.0.0.0/33]\n"), "Service",
		`spec.LoadBalancerSourceRanges[0]: Invalid value: \"10.0.0.0/33\": must be a valid CIDR value`},
	{"node port on a ClusterIP service", badService("", "  ports:\n  - port: 80\n    nodePort: 30080\n"), "Service",
		"spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"},
	{"affinity timeout", badService("", port80+"  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n    clientIP:\n      timeoutSeconds: 0\n"), "Service",
		`spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400`},
	{"endpoint on loopback", badSlice("", endpointsAt("127.0.0.1")), "EndpointSlice",
		`endpoints[0].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)`},
	{"endpoint at the metadata service", badSlice("", endpointsAt("10.0.0.5", "169.254.169.254")), "EndpointSlice",
		`endpoints[1].addresses[0]: Invalid value: \"169.254.169.254\": may not be in the link-local range (169.254.0.0/16, fe80::/10)`},
	{"endpoint at link-local multicast", badSlice("", endpointsAt("224.0.0.1")), "EndpointSlice",
		`endpoints[0].addresses[0]: Invalid value: \"224.0.0.1\": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)`},
	{"endpoint unspecified", badSlice("", endpointsAt("0.0.0.0")), "EndpointSlice",
		`endpoints[0].addresses[0]: Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0)`},
	{"endpoint not an address", badSlice("", endpointsAt("pod-a")), "EndpointSlice",
		`endpoints[0].addresses[0]: Invalid value: \"pod-a\": must be a valid IP address`},
	{"endpoint with leading zeros", badSlice("", endpointsAt("10.0.0.05")), "EndpointSlice",
		`endpoints[0].addresses[0]: Invalid value: \"10.0.0.05\": must not have leading 0s`},
	{"IPv6 endpoint in an IPv4 slice", badSlice("", endpointsAt("fd00::5")), "EndpointSlice",
		`endpoints[0].addresses: Invalid value: \"fd00::5\": must be an IPv4 address`},
	{"1001 endpoints", badSlice("", endpointsAt(slicesRepeat("10.0.0.5", 1001)...)), "EndpointSlice",
		`endpoints: Too many: 1001: must have at most 1000 items`},
	{"endpoint port protocol", strings.Replace(badSlice("", endpointsAt("10.0.0.5")), "  port: 8080\n", "  port: 8080\n  protocol: ICMP\n", 1), "EndpointSlice",
		`ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"`},
	{"service-name label of 200 characters", badSlice("  labels:\n    kubernetes.io/service-name: "+strings.Repeat("s", 200)+"\n", endpointsAt("10.0.0.5")), "EndpointSlice",
		`metadata.labels: Invalid value: \"` + strings.Repeat("s", 200) + `\": must be no more than 63 bytes`},
	{"address type", strings.Replace(badSlice("", endpointsAt("10.0.0.5")), "addressType: IPv4", "addressType: IP", 1), "EndpointSlice",
		`addressType: Unsupported value: \"IP\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"`},
	{"service CIDR not canonical", "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata:\n  name: bad\nspec:\n  cidrs: [10.96.0.1/16]\n", "ServiceCIDR",
		`spec.cidrs[0]: Invalid value: \"10.96.0.1/16\": must not have bits set beyond the prefix length`},
	{"node name", "apiVersion: v1\nkind: Node\nmetadata:\n  name: Node_B\n", "Node",
		`metadata.name: Invalid value: \"Node_B\": a lowercase RFC 1123 subdomain must consist of`},
	{"pod CIDR", "apiVersion: v1\nkind: Node\nmetadata:\n  name: bad\nspec:\n  podCIDRs: [10.244.0.0/40]\n", "Node",
		`spec.podCIDRs[0]: Invalid value: \"10.244.0.0/40\": must be a valid CIDR value`},
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestSourceRefusesInvalid feeds the source a file of valid objects and
// one the API server would refuse: the refused one is logged with its
// field path, file and line and counted, the others are served.
func TestSourceRefusesInvalid(t *testing.T) {
	valid := svcYAML + "---\n" + sliceYAML + "---\n" + nodeYAML + "---\n"
	line := strings.Count(valid, "\n") + 1
	for _, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "all.yaml")
			writeFile(t, path, valid+tc.doc)
			var log refusalLog
			reg := prometheus.NewRegistry()
			src := New(path, Config{Logger: log.logger(), Registerer: reg})
			h := newRecordingHandler()
			runSource(t, src, h)
			<-h.synced
			if diff := cmp.Diff([]string{"add Node test-node", "add Service demo/web", "add EndpointSlice demo/web-1"}, h.take()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			lines := log.refusals()
			where := fmt.Sprintf(`"path"=%q "line"=%d`, path, line)
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || !strings.Contains(lines[0], where) ||
				!strings.Contains(lines[0], `"kind"="`+tc.kind+`"`) {
				t.Errorf("logged %q, want one refusal of a %s with %s and %s", lines, tc.kind, tc.want, where)
			}
			if diff := cmp.Diff(map[string]float64{tc.kind: 1}, refusedObjects(t, reg)); diff != "" {
				t.Errorf("refused objects (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeRefusesInvalid: Decode returns the valid objects, and an
// *Error per refused one carrying the API server's error.
func TestDecodeRefusesInvalid(t *testing.T) {
	valid := svcYAML + "---\n" + sliceYAML + "---\n" + nodeYAML + "---\n"
	line := strings.Count(valid, "\n") + 1
	for _, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode("all.yaml", []byte(valid+tc.doc))
			if diff := cmp.Diff([]string{"Service demo/web", "EndpointSlice demo/web-1", "Node test-node"}, objectNames(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			var me *Error
			if !errors.As(err, &me) || me.Path != "all.yaml" || me.Line != line || !apierrors.IsInvalid(err) {
				t.Fatalf("error %v, want an *Error at all.yaml:%d holding an Invalid error", err, line)
			}
			if want := strings.ReplaceAll(tc.want, `\"`, `"`); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		})
	}
}

// TestSourceRefusesEdit: an object edited into one the API server would
// refuse is removed (and logged and counted once, however often the file
// is re-read unchanged); fixed, it is served again.
func TestSourceRefusesEdit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "svc.yaml")
	other := filepath.Join(dir, "node.yaml")
	writeFile(t, path, svcYAML)
	writeFile(t, other, nodeYAML)
	var log refusalLog
	reg := prometheus.NewRegistry()
	src := New(dir, Config{Debounce: 20 * time.Millisecond, Logger: log.logger(), Registerer: reg})
	h := newRecordingHandler()
	runSource(t, src, h)
	<-h.synced
	waitEvents(t, h, []string{"add Node test-node", "add Service demo/web"})

	writeFile(t, path, strings.Replace(svcYAML, "port: 80", "port: 0", 1))
	waitEvents(t, h, []string{"delete Service demo/web"})
	// Another file's change re-reads the unchanged invalid one.
	writeFile(t, other, strings.Replace(nodeYAML, "192.168.0.2", "192.168.0.3", 1))
	waitEvents(t, h, []string{"update Node test-node"})
	if n := len(log.refusals()); n != 1 {
		t.Errorf("%d refusals logged, want 1: %q", n, log.refusals())
	}
	if diff := cmp.Diff(map[string]float64{"Service": 1}, refusedObjects(t, reg)); diff != "" {
		t.Errorf("refused objects (-want +got):\n%s", diff)
	}

	writeFile(t, path, svcYAML)
	waitEvents(t, h, []string{"add Service demo/web"})
}

// TestSourceRegistrationConflict: a Registerer that refuses the metric
// fails Run, naming the source.
func TestSourceRegistrationConflict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.yaml")
	writeFile(t, path, svcYAML)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "proxykit_source_objects_refused_total", Help: "x"}))
	err := New(path, Config{Registerer: reg}).Run(context.Background(), newRecordingHandler())
	if err == nil || !strings.Contains(err.Error(), "manifests") {
		t.Errorf("Run = %v, want a registration error naming the source", err)
	}
}
