package nfacct

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFake(t *testing.T) {
	ctx := context.Background()
	var f Fake
	if err := f.Count("n", 1, 1); !errors.Is(err, ErrNotExist) {
		t.Errorf("Count before Ensure: %v, want ErrNotExist", err)
	}
	if _, err := f.Get(ctx, "n"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Get before Ensure: %v, want ErrNotExist", err)
	}
	for range 2 {
		if err := f.Ensure(ctx, "n"); err != nil {
			t.Fatal(err)
		}
		if err := f.Count("n", 2, 100); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Counter{Name: "n", Packets: 4, Bytes: 200}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	u := &Fake{Unsupported: true}
	if err := u.Ensure(ctx, "n"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Unsupported Ensure: %v", err)
	}
	if _, err := u.Get(ctx, "n"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Unsupported Get: %v", err)
	}
}
