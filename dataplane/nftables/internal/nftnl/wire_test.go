package nftnl_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// TestWire: the messages of a batch are, attribute for attribute and byte
// for byte, those nft 1.0.6 sends for the same script. The golden files
// hold nft --debug=mnl's capture of testdata/wire-*.nft (its messages
// after nfgenmsg, one a line as "nft <type>" then each attribute as
// [length N(ested):type] and its data in words); the batch begin and end
// and nft's own cache requests are left out, and so are the messages'
// sequence numbers. No root is needed: nothing is sent.
func TestWire(t *testing.T) {
	for _, c := range []struct {
		family knftables.Family
		name   string
	}{{knftables.IPv4Family, "wire-ip"}, {knftables.IPv6Family, "wire-ip6"}} {
		script, err := os.ReadFile("testdata/" + c.name + ".nft")
		if err != nil {
			t.Fatal(err)
		}
		golden, err := os.ReadFile("testdata/" + c.name + ".golden")
		if err != nil {
			t.Fatal(err)
		}
		ops, err := scriptOps(string(script))
		if err != nil {
			t.Fatal(err)
		}
		b, err := nftnl.EncodeForTest(c.family, table, ops)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(strings.Split(string(golden), "\n"), strings.Split(dumpBatch(b), "\n")); d != "" {
			t.Errorf("%s: batch differs from nft's (-nft +nftnl):\n%s", c.name, d)
		}
	}
}

// dumpBatch writes a batch's nftables messages as the golden files do.
func dumpBatch(b []byte) string {
	var out strings.Builder
	for len(b) >= 16 {
		n := int(binary.NativeEndian.Uint32(b))
		if typ := int(binary.NativeEndian.Uint16(b[4:])) - 10<<8; typ >= 0 {
			fmt.Fprintf(&out, "nft %d", typ)
			dumpAttrs(b[20:n], &out)
			out.WriteString("\n")
		}
		b = b[n:]
	}
	return out.String()
}

func dumpAttrs(b []byte, out *strings.Builder) {
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		t := binary.NativeEndian.Uint16(b[2:])
		if n < 4 || n > len(b) {
			fmt.Fprintf(out, " BAD(%d>%d)", n, len(b))
			return
		}
		padded := min((n+3)&^3, len(b))
		if t&0x8000 != 0 {
			fmt.Fprintf(out, " [%dN:%d]", n, t&0x3fff)
			dumpAttrs(b[4:n], out)
		} else {
			fmt.Fprintf(out, " [%d:%d]", n, t&0x3fff)
			for i := 4; i < padded; i += 4 {
				fmt.Fprintf(out, " %x", b[i:min(i+4, padded)])
			}
		}
		b = b[padded:]
	}
}
