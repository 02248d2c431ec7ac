package informer

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	networking "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

type cidrRecorder struct{ *recorder }

func (r cidrRecorder) OnServiceCIDR(old, new *networking.ServiceCIDR) {
	name := func(c *networking.ServiceCIDR) string {
		if c == nil {
			return "nil"
		}
		return c.Name
	}
	r.add("servicecidr " + name(old) + " -> " + name(new))
}

// TestSourceServiceCIDRs: a Handler that takes ServiceCIDRs gets them,
// initial list and later changes.
func TestSourceServiceCIDRs(t *testing.T) {
	cidr := &networking.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networking.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}}
	client := fake.NewClientset(cidr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := cidrRecorder{newRecorder()}
	go func() { _ = New(client, Config{Logger: testr.New(t)}).Run(ctx, r) }()
	wait := func(want []string) {
		t.Helper()
		var got []string
		for i := 0; i < 1000 && len(got) < len(want); i++ {
			time.Sleep(10 * time.Millisecond)
			got = append(got, r.take()...)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	}
	wait([]string{"servicecidr nil -> kubernetes"})
	if err := client.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait([]string{"servicecidr kubernetes -> nil"})
}
