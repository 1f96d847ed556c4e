package raftnode

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger is etcd raft's Logger over slog. raft logs every election at
// info level; with thousands of groups that is a flood, so its info lines are
// debug lines here and its warnings stay warnings. Nothing is formatted for
// a level the handler drops.
type raftLogger struct{ log *slog.Logger }

func (l raftLogger) print(level slog.Level, v []any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprint(v...))
	}
}

func (l raftLogger) printf(level slog.Level, format string, v []any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, v...))
	}
}

func (l raftLogger) Debug(v ...any)                   { l.print(slog.LevelDebug, v) }
func (l raftLogger) Debugf(format string, v ...any)   { l.printf(slog.LevelDebug, format, v) }
func (l raftLogger) Info(v ...any)                    { l.print(slog.LevelDebug, v) }
func (l raftLogger) Infof(format string, v ...any)    { l.printf(slog.LevelDebug, format, v) }
func (l raftLogger) Warning(v ...any)                 { l.print(slog.LevelWarn, v) }
func (l raftLogger) Warningf(format string, v ...any) { l.printf(slog.LevelWarn, format, v) }
func (l raftLogger) Error(v ...any)                   { l.print(slog.LevelError, v) }
func (l raftLogger) Errorf(format string, v ...any)   { l.printf(slog.LevelError, format, v) }
func (l raftLogger) Fatal(v ...any)                   { l.Panic(v...) }
func (l raftLogger) Fatalf(format string, v ...any)   { l.Panicf(format, v...) }

func (l raftLogger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	l.log.Error(s)
	panic(s)
}

func (l raftLogger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	l.log.Error(s)
	panic(s)
}
