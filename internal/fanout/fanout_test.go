package fanout

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMapKeepsOrder(t *testing.T) {
	in := make([]int, 1000)
	for i := range in {
		in[i] = i
	}
	for _, tc := range []struct{ workers, minPer int }{{1, 1}, {4, 1}, {4, 300}, {4, 2000}, {16, 0}, {0, 10}} {
		t.Run(fmt.Sprintf("%d workers, %d per", tc.workers, tc.minPer), func(t *testing.T) {
			out := make([]string, len(in))
			var skips []string
			Map(tc.workers, tc.minPer, in, out, func(reason string, kv ...any) {
				skips = append(skips, fmt.Sprint(append([]any{reason}, kv...)...))
			}, func(skip Skip) func(int) string {
				return func(i int) string {
					if i%7 == 0 {
						skip("seven", "item", i)
						skip("again", "item", i)
					}
					return fmt.Sprint(i * 2)
				}
			})
			var wantOut, wantSkips []string
			for _, i := range in {
				wantOut = append(wantOut, fmt.Sprint(i*2))
				if i%7 == 0 {
					wantSkips = append(wantSkips, fmt.Sprint("seven", "item", i), fmt.Sprint("again", "item", i))
				}
			}
			if diff := cmp.Diff(wantOut, out); diff != "" {
				t.Errorf("out (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantSkips, skips); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMapGoroutines: each goroutine gets its own function, and no more
// goroutines start than the items allow.
func TestMapGoroutines(t *testing.T) {
	for _, tc := range []struct{ workers, minPer, items, want int }{
		{4, 256, 100, 1}, {4, 256, 600, 2}, {4, 256, 5000, 4}, {1, 1, 50, 1}, {3, 1, 2, 2},
	} {
		calls := 0
		in, out := make([]int, tc.items), make([]int, tc.items)
		Map(tc.workers, tc.minPer, in, out, func(string, ...any) {}, func(Skip) func(int) int {
			calls++
			return func(int) int { return 1 }
		})
		if calls != tc.want {
			t.Errorf("%d workers, %d per, %d items: %d goroutines, want %d", tc.workers, tc.minPer, tc.items, calls, tc.want)
		}
	}
}
