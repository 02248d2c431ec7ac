package pmap_test

import (
	"fmt"

	"github.com/proxykit/proxykit/internal/pmap"
)

// Example shows the property the trackers rely on: a snapshot is unchanged
// by the versions derived from it.
func Example() {
	var v1 pmap.Map[string, int]
	v1 = v1.Set("web", 3).Set("dns", 2)
	v2 := v1.Set("web", 4).Delete("dns")

	web1, _ := v1.Get("web")
	web2, _ := v2.Get("web")
	fmt.Println(v1.Len(), web1, v2.Len(), web2)
	// Output: 2 3 1 4
}
