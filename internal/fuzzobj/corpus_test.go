package fuzzobj

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseCorpusFile(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []any
		// wantErr is part of the error; "" means no error.
		wantErr string
	}{
		{
			name: "strings and bytes",
			data: "go test fuzz v1\nstring(\"a\\x00\\\"b\")\n[]byte(\"\\xff\\x01\")\nstring(`raw\\n`)\n[]byte(\"\")\n",
			want: []any{"a\x00\"b", []byte{0xff, 1}, `raw\n`, []byte{}},
		},
		{
			name: "bools and integers",
			data: "go test fuzz v1\nbool(true)\nbool(false)\nint(-9223372036854775808)\nint8(-128)\nint16(0x7fff)\nint32(-7)\nint64(1_000)\n" +
				"uint(18446744073709551615)\nuint8(255)\nuint16(0o17)\nuint32(4)\nuint64(0b101)\n",
			want: []any{true, false, int(math.MinInt64), int8(-128), int16(0x7fff), int32(-7), int64(1000),
				uint(math.MaxUint64), uint8(255), uint16(15), uint32(4), uint64(5)},
		},
		{
			name: "bytes and runes as characters or numbers",
			data: "go test fuzz v1\nbyte('a')\nbyte('\\x80')\nbyte(7)\nrune('ü')\nrune('\\'')\nrune(-1)\n",
			want: []any{byte('a'), byte(0x80), byte(7), 'ü', '\'', rune(-1)},
		},
		{
			name: "floats",
			data: "go test fuzz v1\nfloat64(1.5)\nfloat64(-2)\nfloat32(0.25)\nfloat64(+Inf)\nfloat64(-Inf)\nfloat64(NaN)\n" +
				"math.Float64frombits(0x7ff8000000000001)\nmath.Float32frombits(0x3f800000)\n",
			want: []any{1.5, -2.0, float32(0.25), math.Inf(1), math.Inf(-1), math.NaN(),
				math.Float64frombits(0x7ff8000000000001), float32(1)},
		},
		{
			name: "blank lines, spaces and CRLF ignored",
			data: "go test fuzz v1\r\n\n  int32(1)  \r\n\t\nstring(\"x\")",
			want: []any{int32(1), "x"},
		},
		{name: "header only", data: "go test fuzz v1\n"},
		{name: "empty file", data: "", wantErr: "first line"},
		{name: "other version", data: "go test fuzz v2\nint(1)\n", wantErr: "first line"},
		{name: "no header", data: "int(1)\n", wantErr: "first line"},
		{name: "not an expression", data: "go test fuzz v1\nint(\n", wantErr: "line 2"},
		{name: "not a call", data: "go test fuzz v1\n\"x\"\n", wantErr: "conversion"},
		{name: "two arguments", data: "go test fuzz v1\nint(1, 2)\n", wantErr: "conversion"},
		{name: "spread argument", data: "go test fuzz v1\nstring(\"a\"...)\n", wantErr: "conversion"},
		{name: "unknown type", data: "go test fuzz v1\ncomplex128(1)\n", wantErr: "not a fuzzable type"},
		{name: "other slice", data: "go test fuzz v1\n[]int(\"x\")\n", wantErr: "[]byte"},
		{name: "array", data: "go test fuzz v1\n[2]byte(\"xy\")\n", wantErr: "[]byte"},
		{name: "bytes from a number", data: "go test fuzz v1\n[]byte(1)\n", wantErr: "string literal"},
		{name: "string from a number", data: "go test fuzz v1\nstring(1)\n", wantErr: "string literal"},
		{name: "bad escape", data: "go test fuzz v1\nstring(\"\\q\")\n", wantErr: "line 2"},
		{name: "bool from a number", data: "go test fuzz v1\nbool(1)\n", wantErr: "true or false"},
		{name: "bool from another name", data: "go test fuzz v1\nbool(yes)\n", wantErr: "true or false"},
		{name: "int overflow", data: "go test fuzz v1\nint8(128)\n", wantErr: "out of range"},
		{name: "negative uint", data: "go test fuzz v1\nuint(-1)\n", wantErr: "invalid syntax"},
		{name: "plus sign", data: "go test fuzz v1\nint(+1)\n", wantErr: "integer literal"},
		{name: "int from a float", data: "go test fuzz v1\nint(1.5)\n", wantErr: "integer literal"},
		{name: "int from a name", data: "go test fuzz v1\nint32(x)\n", wantErr: "integer literal"},
		{name: "int from an expression", data: "go test fuzz v1\nint(1+2)\n", wantErr: "integer literal"},
		{name: "negated name", data: "go test fuzz v1\nfloat64(-NaN)\n", wantErr: "number literal"},
		{name: "unsigned infinity", data: "go test fuzz v1\nfloat64(Inf)\n", wantErr: "number literal"},
		{name: "float from a string", data: "go test fuzz v1\nfloat64(\"1\")\n", wantErr: "number literal"},
		{name: "byte too big", data: "go test fuzz v1\nbyte('Ā')\n", wantErr: "does not fit"},
		{name: "two characters", data: "go test fuzz v1\nrune('ab')\n", wantErr: "line 2"},
		{name: "other package", data: "go test fuzz v1\nstrconv.Float64frombits(1)\n", wantErr: "unknown function"},
		{name: "other math function", data: "go test fuzz v1\nmath.Sqrt(2)\n", wantErr: "unknown function"},
		{name: "bits from a float", data: "go test fuzz v1\nmath.Float32frombits(1.5)\n", wantErr: "integer literal"},
		{name: "bits overflow", data: "go test fuzz v1\nmath.Float32frombits(0x100000000)\n", wantErr: "out of range"},
		{name: "method call", data: "go test fuzz v1\nx.y.z(1)\n", wantErr: "unknown function"},
		{name: "func literal", data: "go test fuzz v1\nfunc(){}(1)\n", wantErr: "conversion to a fuzzable type"},
		{name: "bad line after good ones", data: "go test fuzz v1\nint(1)\n\nint(x)\n", wantErr: "line 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCorpusFile([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q (values %v)", err, tc.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadCorpus(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b", "go test fuzz v1\nint32(2)\n")
	write("a", "go test fuzz v1\nstring(\"x\")\nbool(true)\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{Name: "a", Values: []any{"x", true}}, {Name: "b", Values: []any{int32(2)}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}

	write("c", "go test fuzz v1\nint32(\n")
	if _, err := ReadCorpus(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "c")) {
		t.Errorf("malformed file: error %v, want one naming it", err)
	}
	if _, err := ReadCorpus(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing directory: no error")
	}
}

// TestCheckedInCorporaParse reads every corpus of the module, whatever its
// target: they are the format as go test writes it.
func TestCheckedInCorporaParse(t *testing.T) {
	var dirs []string
	for _, pattern := range []string{"../../testdata/fuzz/*", "../../*/testdata/fuzz/*", "../../*/*/testdata/fuzz/*"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, m...)
	}
	if len(dirs) < 4 {
		t.Fatalf("found only the corpora %v", dirs)
	}
	for _, dir := range dirs {
		entries, err := ReadCorpus(dir)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, e := range entries {
			if len(e.Values) == 0 {
				t.Errorf("%s/%s: no values", dir, e.Name)
			}
		}
	}
}

// FuzzParseCorpusFile: whatever the bytes, parsing returns values or an
// error, never panics.
func FuzzParseCorpusFile(f *testing.F) {
	f.Add([]byte("go test fuzz v1\nstring(\"a\")\nint32(-1)\n"))
	f.Add([]byte("go test fuzz v1\nbyte('\\x00')\nrune('')\nmath.Float64frombits(0x1)\n"))
	f.Add([]byte("go test fuzz v1\n[]byte(`\x00`)\nfloat32(-Inf)\nbool(true)\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		vals, err := parseCorpusFile(data)
		if err != nil && vals != nil {
			t.Errorf("error %v with values %v", err, vals)
		}
	})
}

func TestModelCorporaDecode(t *testing.T) {
	entries, err := ModelCorpora("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("no entries")
	}
	for _, e := range entries {
		if e.Name == "" || e.Family == "" {
			t.Errorf("entry %+v lacks a name or family", e.Name)
		}
	}
}
