package fuzzobj

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// corpusHeader is the first line of every file in Go's fuzz corpus format.
const corpusHeader = "go test fuzz v1"

// Entry is one file of a fuzz corpus.
type Entry struct {
	// Name is the file's name within its corpus directory.
	Name string
	// Values are the arguments the file passes to the fuzz function, in
	// order, each of the Go type its line names: string, []byte, bool,
	// int, int8 to int64, uint, uint8 to uint64 (byte is uint8, rune is
	// int32), float32 or float64.
	Values []any
}

// ReadCorpus reads every file of the corpus directory dir (a
// testdata/fuzz/FuzzXxx directory), in name order. A malformed file is an
// error naming it, not a panic and not an entry left out: a replay must not
// silently skip the inputs it exists to replay.
func ReadCorpus(dir string) ([]Entry, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, f := range files {
		if f.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			return nil, err
		}
		vals, err := parseCorpusFile(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, f.Name()), err)
		}
		out = append(out, Entry{Name: f.Name(), Values: vals})
	}
	return out, nil
}

// parseCorpusFile decodes one corpus file: the header line, then one value
// a line. Blank lines are ignored, as go test ignores them.
func parseCorpusFile(data []byte) ([]any, error) {
	header, rest, _ := bytes.Cut(data, []byte("\n"))
	if string(bytes.TrimSuffix(header, []byte("\r"))) != corpusHeader {
		return nil, fmt.Errorf("first line is not %q", corpusHeader)
	}
	var vals []any
	for i, line := range bytes.Split(rest, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		v, err := parseValue(string(line))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+2, err)
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// parseValue decodes one line, a conversion such as int32(-7) or
// []byte("\x00"), by parsing it as the Go expression it is.
func parseValue(line string) (any, error) {
	expr, err := parser.ParseExpr(line)
	if err != nil {
		return nil, err
	}
	call, ok := expr.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 || call.Ellipsis.IsValid() {
		return nil, fmt.Errorf("%q is not a conversion of one value", line)
	}
	arg := call.Args[0]
	switch fun := call.Fun.(type) {
	case *ast.ArrayType:
		if elt, ok := fun.Elt.(*ast.Ident); !ok || elt.Name != "byte" || fun.Len != nil {
			return nil, fmt.Errorf("%q: the only composite type is []byte", line)
		}
		s, err := stringLit(arg)
		return []byte(s), err
	case *ast.SelectorExpr:
		pkg, ok := fun.X.(*ast.Ident)
		if !ok || pkg.Name != "math" {
			return nil, fmt.Errorf("%q: unknown function", line)
		}
		switch fun.Sel.Name {
		case "Float32frombits":
			bits, err := number[uint32](arg, 32, strconv.ParseUint)
			return math.Float32frombits(bits), err
		case "Float64frombits":
			bits, err := number[uint64](arg, 64, strconv.ParseUint)
			return math.Float64frombits(bits), err
		}
		return nil, fmt.Errorf("%q: unknown function", line)
	case *ast.Ident:
		return convert(fun.Name, arg)
	}
	return nil, fmt.Errorf("%q is not a conversion to a fuzzable type", line)
}

// convert decodes arg as a value of the named basic type.
func convert(typ string, arg ast.Expr) (any, error) {
	switch typ {
	case "string":
		return stringLit(arg)
	case "bool":
		if id, ok := arg.(*ast.Ident); ok && (id.Name == "true" || id.Name == "false") {
			return id.Name == "true", nil
		}
		return nil, errors.New("bool needs true or false")
	case "byte":
		if c, ok, err := charLit(arg); ok {
			if err == nil && c > math.MaxUint8 {
				err = fmt.Errorf("character %q does not fit a byte", c)
			}
			return byte(c), err
		}
		return number[uint8](arg, 8, strconv.ParseUint)
	case "rune":
		if c, ok, err := charLit(arg); ok {
			return c, err
		}
		return number[int32](arg, 32, strconv.ParseInt)
	case "int":
		return number[int](arg, strconv.IntSize, strconv.ParseInt)
	case "int8":
		return number[int8](arg, 8, strconv.ParseInt)
	case "int16":
		return number[int16](arg, 16, strconv.ParseInt)
	case "int32":
		return number[int32](arg, 32, strconv.ParseInt)
	case "int64":
		return number[int64](arg, 64, strconv.ParseInt)
	case "uint":
		return number[uint](arg, strconv.IntSize, strconv.ParseUint)
	case "uint8":
		return number[uint8](arg, 8, strconv.ParseUint)
	case "uint16":
		return number[uint16](arg, 16, strconv.ParseUint)
	case "uint32":
		return number[uint32](arg, 32, strconv.ParseUint)
	case "uint64":
		return number[uint64](arg, 64, strconv.ParseUint)
	case "float32":
		f, err := floatLit(arg, 32)
		return float32(f), err
	case "float64":
		return floatLit(arg, 64)
	}
	return nil, fmt.Errorf("%s is not a fuzzable type", typ)
}

func stringLit(arg ast.Expr) (string, error) {
	lit, ok := arg.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", errors.New("string literal required")
	}
	return strconv.Unquote(lit.Value)
}

// charLit decodes a character literal; ok is false when arg is none.
func charLit(arg ast.Expr) (c rune, ok bool, err error) {
	lit, isLit := arg.(*ast.BasicLit)
	if !isLit || lit.Kind != token.CHAR {
		return 0, false, nil
	}
	c, _, rest, err := strconv.UnquoteChar(lit.Value[1:len(lit.Value)-1], '\'')
	if err == nil && rest != "" {
		err = fmt.Errorf("%s holds more than one character", lit.Value)
	}
	return c, true, err
}

// signedLit returns the text of an integer or float literal, negated or
// not; kind is the literal's token. go test writes infinities as +Inf and
// -Inf and NaN as NaN, and nothing else with a plus sign.
func signedLit(arg ast.Expr) (text string, kind token.Token, ok bool) {
	sign := ""
	if u, isUnary := arg.(*ast.UnaryExpr); isUnary && (u.Op == token.SUB || u.Op == token.ADD) {
		sign, arg = u.Op.String(), u.X
	}
	switch x := arg.(type) {
	case *ast.BasicLit:
		if (x.Kind == token.INT || x.Kind == token.FLOAT) && sign != "+" {
			return sign + x.Value, x.Kind, true
		}
	case *ast.Ident:
		if x.Name == "Inf" && sign != "" || x.Name == "NaN" && sign == "" {
			return sign + x.Name, token.FLOAT, true
		}
	}
	return "", token.ILLEGAL, false
}

// number decodes an integer literal of the given size with parse
// (strconv.ParseInt or strconv.ParseUint), which rejects values that do
// not fit.
func number[T int | int8 | int16 | int32 | int64 | uint | uint8 | uint16 | uint32 | uint64, P int64 | uint64](
	arg ast.Expr, bits int, parse func(string, int, int) (P, error)) (T, error) {
	text, kind, ok := signedLit(arg)
	if !ok || kind != token.INT {
		return 0, errors.New("integer literal required")
	}
	n, err := parse(text, 0, bits)
	return T(n), err
}

func floatLit(arg ast.Expr, bits int) (float64, error) {
	text, _, ok := signedLit(arg)
	if !ok {
		return 0, errors.New("number literal required")
	}
	return strconv.ParseFloat(text, bits)
}

// args reads an entry's values as the parameters of one fuzz function,
// remembering the first mismatch so that a decoder reads them all and
// checks once.
type args struct {
	e   Entry
	i   int
	err error
}

func arg[T any](a *args) T {
	var v T
	if a.err != nil {
		return v
	}
	if a.i >= len(a.e.Values) {
		a.err = fmt.Errorf("corpus entry %s: %d values, want more", a.e.Name, len(a.e.Values))
		return v
	}
	v, ok := a.e.Values[a.i].(T)
	if !ok {
		a.err = fmt.Errorf("corpus entry %s: value %d is a %T, want %T", a.e.Name, a.i+1, a.e.Values[a.i], v)
	}
	a.i++
	return v
}

// done returns the first mismatch, or an error if values are left over.
func (a *args) done() error {
	if a.err == nil && a.i != len(a.e.Values) {
		a.err = fmt.Errorf("corpus entry %s: %d values, want %d", a.e.Name, len(a.e.Values), a.i)
	}
	return a.err
}
