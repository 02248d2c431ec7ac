package manifest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/source/validation"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	sigyaml "sigs.k8s.io/yaml"
)

// Error is a manifest file that cannot be read or decoded.
type Error struct {
	Path string
	// Line is the 1-based line of the problem: where the YAML or JSON
	// parser failed, else the first line of the offending document. 0 when
	// the file could not be read at all.
	Line int
	Err  error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.Path, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Decode decodes data, the content of the manifest file path (used
// in errors only), into the Services, EndpointSlices (discovery.k8s.io/v1),
// Nodes and ServiceCIDRs (networking.k8s.io/v1) it holds, in file order. data is YAML, possibly several
// documents separated by "---", or a stream of JSON objects; a "kind: List"
// contributes its items. Decoding is strict (an unknown field is an error,
// catching typos) and uses client-go's scheme. Objects of other kinds that
// scheme knows (a Deployment beside its Service, say) are left out; an
// unknown kind is an error. Namespaced objects without a namespace get
// "default", as kubectl would give them, and every object gets the
// defaults the API server would give it on create (an EndpointSlice port
// without a name is named "", a Service port without a protocol is TCP,
// and so on), so that a manifest means what it would mean applied to a
// cluster.
//
// Every object is then checked as the API server
// would check it on create (source/validation): one it would refuse is
// left out, and the others are returned with an error joining one *Error
// per refused object, whose Line is its document's and whose Err is the
// API server's own error (apierrors.IsInvalid), naming each field.
// Otherwise the error, if any, is an *Error and no object is returned.
func Decode(path string, data []byte) ([]runtime.Object, error) {
	d := newDecoder()
	objs, _, err := d.decode(path, data, nil)
	if err != nil {
		return nil, err
	}
	return objs, errors.Join(d.refused...)
}

type decoder struct {
	decoder runtime.Decoder
	// checker, when set, checks every object decoded, and logs and counts
	// those it refuses; without it refused collects them.
	checker *validation.Checker
	refused []error
}

func newDecoder() *decoder {
	return &decoder{decoder: serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()}
}

// document is one YAML or JSON document of a file.
type document struct {
	line int
	// raw is the document as written; yaml is set when it is YAML, to be
	// converted to JSON, and lines is then the file's line count.
	raw   []byte
	yaml  bool
	lines int
}

// docKey identifies a document by its bytes.
type docKey [sha256.Size]byte

// decode decodes a file. Documents whose bytes are in known (what the last
// decode of the file returned as its documents) are not decoded again:
// their objects are reused, so that an edit of one object in a file of
// thousands costs one document's decoding. It returns the objects and the
// documents of this decode.
func (d *decoder) decode(path string, data []byte, known map[docKey][]runtime.Object) ([]runtime.Object, map[docKey][]runtime.Object, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		err.Path = path
		return nil, nil, err
	}
	var out []runtime.Object
	seen := make(map[docKey][]runtime.Object, len(docs))
	for _, doc := range docs {
		key := docKey(sha256.Sum256(doc.raw))
		objs, ok := known[key]
		if !ok {
			if objs, err = d.decodeRaw(doc); err != nil {
				return nil, nil, err.withPath(path)
			}
			// A refused object is reported once, when its document is
			// decoded, not at every read of an unchanged one.
			objs = d.keepValid(path, doc.line, objs)
		}
		seen[key] = objs
		out = append(out, objs...)
	}
	return out, seen, nil
}

// keepValid returns the objects of the document at path:line that the API
// server would accept, and reports the others.
func (d *decoder) keepValid(path string, line int, objs []runtime.Object) []runtime.Object {
	out := objs[:0]
	for _, o := range objs {
		var err error
		if d.checker != nil {
			err = d.checker.Check(o, "path", path, "line", line)
		} else if err = validation.Validate(o, validation.Create); err != nil {
			d.refused = append(d.refused, &Error{Path: path, Line: line, Err: err})
		}
		if err == nil {
			out = append(out, o)
		}
	}
	return out
}

// decodeRaw converts a YAML document to JSON and decodes it.
func (d *decoder) decodeRaw(doc document) ([]runtime.Object, *Error) {
	js := doc.raw
	if doc.yaml {
		var err error
		if js, err = sigyaml.YAMLToJSON(doc.raw); err != nil {
			me := yamlError(doc.line, err)
			// go-yaml may point past a last line the reader ended for it.
			me.Line = min(me.Line, doc.lines)
			return nil, me
		}
		if t := bytes.TrimSpace(js); bytes.Equal(t, []byte("null")) || len(t) == 0 {
			return nil, nil // only comments or blank lines
		}
	}
	objs, err := d.decodeDocument(js)
	if err != nil {
		return nil, &Error{Line: doc.line, Err: err}
	}
	return objs, nil
}

func (e *Error) withPath(path string) *Error {
	e.Path = path
	return e
}

// decodeDocument decodes one document, expanding a List.
func (d *decoder) decodeDocument(data []byte) ([]runtime.Object, error) {
	obj, gvk, err := d.decoder.Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	if list, ok := obj.(*v1.List); ok {
		var out []runtime.Object
		for i, item := range list.Items {
			objs, err := d.decodeDocument(item.Raw)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	switch o := obj.(type) {
	case *v1.Service:
		defaultNamespace(&o.Namespace)
		defaultService(o)
		return []runtime.Object{o}, nil
	case *discovery.EndpointSlice:
		defaultNamespace(&o.Namespace)
		defaultEndpointSlice(o)
		return []runtime.Object{o}, nil
	case *v1.Node:
		defaultNode(o)
		return []runtime.Object{o}, nil
	case *networking.ServiceCIDR:
		return []runtime.Object{o}, nil
	}
	switch gvk.Kind {
	case "Service", "EndpointSlice", "Node", "ServiceCIDR":
		return nil, fmt.Errorf("%s %s is not supported; use %s", gvk.Kind, gvk.GroupVersion(), supportedVersion(gvk.Kind))
	}
	return nil, nil
}

func supportedVersion(kind string) string {
	switch kind {
	case "EndpointSlice":
		return "discovery.k8s.io/v1"
	case "ServiceCIDR":
		return "networking.k8s.io/v1"
	}
	return "v1"
}

func defaultNamespace(ns *string) {
	if *ns == "" {
		*ns = v1.NamespaceDefault
	}
}

// splitDocuments cuts data into documents with their first line. JSON is
// recognised by its leading brace (as apimachinery's YAMLOrJSONDecoder
// does); everything else goes through apimachinery's YAML document reader.
func splitDocuments(data []byte) ([]document, *Error) {
	if utilyaml.IsJSONBuffer(data) {
		return splitJSON(data)
	}
	return splitYAML(data)
}

func splitJSON(data []byte) ([]document, *Error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var docs []document
	for {
		start := int(dec.InputOffset())
		start += len(data[start:]) - len(bytes.TrimLeft(data[start:], " \t\r\n"))
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			off := start
			var syn *json.SyntaxError
			if errors.As(err, &syn) {
				off = int(syn.Offset)
			}
			return nil, &Error{Line: lineAt(data, off), Err: err}
		}
		docs = append(docs, document{line: lineAt(data, start), raw: raw})
	}
}

// yamlLine finds the position go-yaml puts in its messages ("yaml: line 3:
// ..." or "line 3: cannot unmarshal ..."), relative to the document.
var yamlLine = regexp.MustCompile(`line (\d+): `)

func splitYAML(data []byte) ([]document, *Error) {
	// The reader returns whole lines of each document without the
	// separators, so each document is found again by its first line to
	// learn where it starts.
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	cursor := 0
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []document
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, &Error{Line: min(cursor+1, len(lines)), Err: err}
		}
		first, _, _ := strings.Cut(string(doc), "\n")
		for cursor < len(lines) && lines[cursor] != first {
			cursor++
		}
		line := cursor + 1
		cursor += bytes.Count(doc, []byte("\n"))
		docs = append(docs, document{line: line, raw: doc, yaml: true, lines: len(lines)})
	}
}

// yamlError places a go-yaml error, whose line is relative to the document
// starting at docLine, in the file.
func yamlError(docLine int, err error) *Error {
	msg := err.Error()
	m := yamlLine.FindStringSubmatchIndex(msg)
	if m == nil {
		return &Error{Line: docLine, Err: err}
	}
	rel, _ := strconv.Atoi(msg[m[2]:m[3]])
	return &Error{
		Line: docLine + rel - 1,
		Err:  &positionedError{msg: msg[:m[0]] + msg[m[1]:], err: err},
	}
}

// positionedError is an error whose message had its position moved into
// Error.Line.
type positionedError struct {
	msg string
	err error
}

func (e *positionedError) Error() string { return e.msg }
func (e *positionedError) Unwrap() error { return e.err }

// lineAt returns the 1-based line of byte offset off in data.
func lineAt(data []byte, off int) int {
	off = min(max(off, 0), len(data))
	return bytes.Count(data[:off], []byte("\n")) + 1
}
