package logtext

import (
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

const (
	// MaxString is the most bytes of one string that String keeps.
	MaxString = 256
	// MaxError is the most bytes of an error message that Error keeps.
	MaxError = 512
)

// cutMark ends every shortened string.
const cutMark = "..."

// String returns s, or its first MaxString bytes followed by "..." when it
// is longer. The cut never splits a UTF-8 sequence.
func String(s string) string {
	return cut(s, MaxString)
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Back up to the start of the rune the cut would split.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + cutMark
}

// Name returns nn with its namespace and name bounded as String does. It
// stays a types.NamespacedName, so that it logs as one does.
func Name(nn types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: String(nn.Namespace), Name: String(nn.Name)}
}

// KObj is klog.KObj with the namespace and name bounded as String does.
func KObj(obj klog.KMetadata) klog.ObjectRef {
	ref := klog.KObj(obj)
	ref.Namespace, ref.Name = String(ref.Namespace), String(ref.Name)
	return ref
}

// Error returns err when its message has at most MaxError bytes, nil for
// nil, and otherwise an error with the message cut to MaxError bytes that
// unwraps to err.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if len(msg) <= MaxError {
		return err
	}
	return &cutError{msg: cut(msg, MaxError), err: err}
}

type cutError struct {
	msg string
	err error
}

func (e *cutError) Error() string { return e.msg }
func (e *cutError) Unwrap() error { return e.err }
