package logtext

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

func TestString(t *testing.T) {
	long := strings.Repeat("a", MaxString)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "kube-dns", "kube-dns"},
		{"at the limit", long, long},
		{"one over", long + "b", long + "..."},
		{"64 KiB", strings.Repeat("x", 64<<10), strings.Repeat("x", MaxString) + "..."},
		// "é" is two bytes; cutting after its first would leave half.
		{"multi-byte at the cut", long[:MaxString-1] + "éé", long[:MaxString-1] + "..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := String(tc.in)
			if got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("String() = %q, not valid UTF-8", got)
			}
		})
	}
}

func TestNameAndKObj(t *testing.T) {
	huge := strings.Repeat("n", 64<<10)
	cut := strings.Repeat("n", MaxString) + "..."
	if diff := cmp.Diff(types.NamespacedName{Namespace: "ns", Name: cut}, Name(types.NamespacedName{Namespace: "ns", Name: huge})); diff != "" {
		t.Errorf("Name() (-want +got):\n%s", diff)
	}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: huge, Name: "web"}}
	if diff := cmp.Diff(klog.ObjectRef{Namespace: cut, Name: "web"}, KObj(svc)); diff != "" {
		t.Errorf("KObj() (-want +got):\n%s", diff)
	}
}

func TestError(t *testing.T) {
	short := errors.New("no such host")
	long := errors.New(strings.Repeat("e", 64<<10))
	for _, tc := range []struct {
		name string
		in   error
		want string
	}{
		{"short", short, "no such host"},
		{"long", long, strings.Repeat("e", MaxError) + "..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Error(tc.in)
			if got.Error() != tc.want {
				t.Errorf("Error() = %q, want %q", got.Error(), tc.want)
			}
			if !errors.Is(got, tc.in) {
				t.Errorf("Error() does not unwrap to its argument")
			}
		})
	}
	if Error(nil) != nil {
		t.Errorf("Error(nil) != nil")
	}
}
