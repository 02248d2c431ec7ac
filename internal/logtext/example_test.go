package logtext_test

import (
	"fmt"
	"strings"

	"github.com/proxykit/proxykit/internal/logtext"
)

// A huge value keeps its start and is marked as cut.
func Example() {
	name := "web-" + strings.Repeat("x", 64<<10)
	s := logtext.String(name)
	fmt.Println(len(s), s[:8], s[len(s)-3:])
	// Output: 259 web-xxxx ...
}
