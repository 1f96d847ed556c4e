package raftnode

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger is etcd raft's Logger over slog. raft logs every election at
// info level; with thousands of groups that is a flood, so its info lines are
// debug lines here and its warnings stay warnings.
type raftLogger struct{ log *slog.Logger }

func (l raftLogger) out(level slog.Level, msg string) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, msg)
	}
}

func (l raftLogger) Debug(v ...any) { l.out(slog.LevelDebug, fmt.Sprint(v...)) }
func (l raftLogger) Debugf(format string, v ...any) {
	l.out(slog.LevelDebug, fmt.Sprintf(format, v...))
}
func (l raftLogger) Info(v ...any)                 { l.out(slog.LevelDebug, fmt.Sprint(v...)) }
func (l raftLogger) Infof(format string, v ...any) { l.out(slog.LevelDebug, fmt.Sprintf(format, v...)) }
func (l raftLogger) Warning(v ...any)              { l.out(slog.LevelWarn, fmt.Sprint(v...)) }
func (l raftLogger) Warningf(format string, v ...any) {
	l.out(slog.LevelWarn, fmt.Sprintf(format, v...))
}
func (l raftLogger) Error(v ...any) { l.out(slog.LevelError, fmt.Sprint(v...)) }
func (l raftLogger) Errorf(format string, v ...any) {
	l.out(slog.LevelError, fmt.Sprintf(format, v...))
}
func (l raftLogger) Fatal(v ...any)                 { l.Panic(v...) }
func (l raftLogger) Fatalf(format string, v ...any) { l.Panicf(format, v...) }
func (l raftLogger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	l.out(slog.LevelError, s)
	panic(s)
}
func (l raftLogger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	l.out(slog.LevelError, s)
	panic(s)
}
