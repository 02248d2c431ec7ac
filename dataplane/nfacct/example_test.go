package nfacct_test

import (
	"context"
	"fmt"

	"github.com/proxykit/proxykit/dataplane/nfacct"
)

// A dataplane takes an nfacct.Interface: it ensures the counter before it
// writes the rule that counts into it, and reads it when scraped. Tests
// hand it a Fake and play the kernel's part with Count.
func Example() {
	ctx := context.Background()
	var acct nfacct.Interface = &nfacct.Fake{}
	if err := acct.Ensure(ctx, "localhost_nps_accepted_pkts"); err != nil {
		fmt.Println("no counting rule:", err)
		return
	}
	_ = acct.(*nfacct.Fake).Count("localhost_nps_accepted_pkts", 10, 600)
	c, _ := acct.Get(ctx, "localhost_nps_accepted_pkts")
	fmt.Println(c.Packets, c.Bytes)
	// Output: 10 600
}
