package main

import (
	"io"
	stdlog "log"
	"log/slog"
	"maps"
	"slices"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
)

// routeLibraryLogs sends what the agent's libraries log through loggers of
// their own to log, so that --logging-format and -v hold for every line on
// stderr, as routeKlog does for klog's (client-go's):
//   - logrus's standard logger, which moby/ipvs, the IPVS library, logs
//     through (a failed "modprobe ip_vs", a kernel without IPVS);
//   - the standard library's log package (through log/slog's default),
//     where net/http's servers write their errors.
//
// The returned function undoes both.
func routeLibraryLogs(log logr.Logger) (undo func()) {
	undoLogrus := routeLogrus(log.WithName("logrus"))
	prevSlog, prevOut, prevFlags := slog.Default(), stdlog.Writer(), stdlog.Flags()
	slog.SetDefault(slog.New(logr.ToSlogHandler(log)))
	return func() {
		slog.SetDefault(prevSlog)
		stdlog.SetOutput(prevOut)
		stdlog.SetFlags(prevFlags)
		undoLogrus()
	}
}

// routeLogrus makes logrus's standard logger write nothing itself and hand
// each entry to log: errors (and fatal and panic) as errors, warnings at
// the default level, info at -v 2, debug at 4, trace at 5. Its level is
// set to the most detailed one log shows, so that nothing is formatted
// only to be dropped.
func routeLogrus(log logr.Logger) (undo func()) {
	l := logrus.StandardLogger()
	prevOut, prevLevel := l.Out, l.GetLevel()
	level := logrus.WarnLevel
	for _, v := range []struct {
		v     int
		level logrus.Level
	}{{5, logrus.TraceLevel}, {4, logrus.DebugLevel}, {2, logrus.InfoLevel}} {
		if log.V(v.v).Enabled() {
			level = v.level
			break
		}
	}
	l.SetOutput(io.Discard)
	l.SetLevel(level)
	prevHooks := l.ReplaceHooks(logrus.LevelHooks{})
	l.AddHook(logrusHook{log: log})
	return func() {
		l.ReplaceHooks(prevHooks)
		l.SetLevel(prevLevel)
		l.SetOutput(prevOut)
	}
}

// logrusHook is a logrus.Hook passing every entry to a logr.Logger.
type logrusHook struct{ log logr.Logger }

// Levels implements logrus.Hook.
func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

// Fire implements logrus.Hook: the entry's message, and its fields as
// key-value pairs in key order (an "error" field of type error becomes the
// error of an error line).
func (h logrusHook) Fire(e *logrus.Entry) error {
	err, _ := e.Data[logrus.ErrorKey].(error)
	var kv []any
	for _, k := range slices.Sorted(maps.Keys(e.Data)) {
		if k == logrus.ErrorKey && err != nil {
			continue
		}
		kv = append(kv, k, e.Data[k])
	}
	switch e.Level {
	case logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel:
		h.log.Error(err, e.Message, kv...)
	case logrus.WarnLevel:
		h.log.Info(e.Message, kv...)
	case logrus.InfoLevel:
		h.log.V(2).Info(e.Message, kv...)
	case logrus.DebugLevel:
		h.log.V(4).Info(e.Message, kv...)
	default:
		h.log.V(5).Info(e.Message, kv...)
	}
	return nil
}
