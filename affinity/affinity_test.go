package affinity

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestSessionAffinityOf(t *testing.T) {
	clientIP := func(secs *int32) *v1.ServiceSpec {
		return &v1.ServiceSpec{
			SessionAffinity: v1.ServiceAffinityClientIP,
			SessionAffinityConfig: &v1.SessionAffinityConfig{
				ClientIP: &v1.ClientIPConfig{TimeoutSeconds: secs},
			},
		}
	}
	badTimeout := func(secs int32) error {
		return &InvalidError{
			Field:  "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
			Value:  secs,
			Reason: "must be greater than 0 and at most 86400",
		}
	}
	cases := []struct {
		name    string
		spec    *v1.ServiceSpec
		want    SessionAffinity
		wantErr error
	}{{
		name: "nil spec",
	}, {
		name: "unset",
		spec: &v1.ServiceSpec{},
	}, {
		name: "None",
		spec: &v1.ServiceSpec{SessionAffinity: v1.ServiceAffinityNone},
	}, {
		name: "None with a stray config, which API defaulting would drop",
		spec: &v1.ServiceSpec{
			SessionAffinity:       v1.ServiceAffinityNone,
			SessionAffinityConfig: &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](-5)}},
		},
	}, {
		name: "ClientIP with a timeout",
		spec: clientIP(ptr.To[int32](300)),
		want: SessionAffinity{ClientIP: true, Timeout: 300 * time.Second},
	}, {
		name: "ClientIP without config takes the default",
		spec: &v1.ServiceSpec{SessionAffinity: v1.ServiceAffinityClientIP},
		want: SessionAffinity{ClientIP: true, Timeout: DefaultClientIPTimeout},
	}, {
		name: "ClientIP with an empty config takes the default",
		spec: &v1.ServiceSpec{SessionAffinity: v1.ServiceAffinityClientIP, SessionAffinityConfig: &v1.SessionAffinityConfig{}},
		want: SessionAffinity{ClientIP: true, Timeout: DefaultClientIPTimeout},
	}, {
		name: "ClientIP without a timeout takes the default",
		spec: clientIP(nil),
		want: SessionAffinity{ClientIP: true, Timeout: 10800 * time.Second},
	}, {
		name:    "timeout 0",
		spec:    clientIP(ptr.To[int32](0)),
		wantErr: badTimeout(0),
	}, {
		name:    "negative timeout",
		spec:    clientIP(ptr.To[int32](-1)),
		wantErr: badTimeout(-1),
	}, {
		name: "timeout 1",
		spec: clientIP(ptr.To[int32](1)),
		want: SessionAffinity{ClientIP: true, Timeout: time.Second},
	}, {
		name: "timeout 86400",
		spec: clientIP(ptr.To[int32](86400)),
		want: SessionAffinity{ClientIP: true, Timeout: MaxClientIPTimeout},
	}, {
		name:    "timeout 86401",
		spec:    clientIP(ptr.To[int32](86401)),
		wantErr: badTimeout(86401),
	}, {
		name: "unknown type",
		spec: &v1.ServiceSpec{SessionAffinity: "Cookie"},
		wantErr: &InvalidError{
			Field:  "spec.sessionAffinity",
			Value:  "Cookie",
			Reason: `supported values: "ClientIP", "None"`,
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SessionAffinityOf(tc.spec)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("SessionAffinityOf (-want +got):\n%s", diff)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSessionAffinity) {
				t.Errorf("error %v does not wrap ErrInvalidSessionAffinity", err)
			}
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v is not an *InvalidError", err)
			}
			if diff := cmp.Diff(tc.wantErr, error(ie)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInvalidErrorMessage(t *testing.T) {
	_, err := SessionAffinityOf(&v1.ServiceSpec{SessionAffinity: "Cookie"})
	want := `invalid session affinity: spec.sessionAffinity: Cookie: supported values: "ClientIP", "None"`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestPolicyUses(t *testing.T) {
	type uses struct{ Cluster, Local bool }
	cases := []struct {
		name string
		p    Policy
		want uses
	}{
		{"Cluster/Cluster, internal only", Policy{}, uses{Cluster: true}},
		{"Cluster/Cluster, external", Policy{ExternallyAccessible: true}, uses{Cluster: true}},
		{"iTP Local, internal only", Policy{InternalLocal: true}, uses{Local: true}},
		{"iTP Local, external", Policy{InternalLocal: true, ExternallyAccessible: true}, uses{Cluster: true, Local: true}},
		{"eTP Local, external", Policy{ExternalLocal: true, ExternallyAccessible: true}, uses{Cluster: true, Local: true}},
		{"eTP Local without an external address in this family", Policy{ExternalLocal: true}, uses{Cluster: true}},
		{"iTP and eTP Local, external", Policy{InternalLocal: true, ExternalLocal: true, ExternallyAccessible: true}, uses{Cluster: true, Local: true}},
		{"iTP and eTP Local, internal only", Policy{InternalLocal: true, ExternalLocal: true}, uses{Local: true}},
		{"trafficDistribution changes nothing", Policy{TrafficDistribution: v1.ServiceTrafficDistributionPreferSameNode}, uses{Cluster: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := uses{Cluster: tc.p.UsesClusterEndpoints(), Local: tc.p.UsesLocalEndpoints()}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("uses (-want +got):\n%s", diff)
			}
		})
	}
}
