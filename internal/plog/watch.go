package plog

// A Watcher is told of every change a reader of the log could be answered
// with: the high watermark or last stable offset advancing (a
// publication), the log start offset moving (retention, DeleteRecords)
// and the log closing. A fetch session registers one per partition for
// its whole life, so that an incremental fetch reads the partitions that
// changed instead of all of them (issue 12: a caught-up consumer of
// 100,000 partitions). A Waker wakes a reader; a Watcher also says which
// log woke it.
//
// LogChanged is called with the log's lock held: it must not block nor
// call into the log (queue the change and return).
type Watcher interface {
	LogChanged()
}

// AddWatcher registers w until RemoveWatcher: a change published after
// AddWatcher returns is told to w. A Watcher registered twice is told
// twice.
func (l *Log) AddWatcher(w Watcher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchers = append(l.watchers, w)
}

// RemoveWatcher unregisters w (once); a Watcher not registered is ignored.
func (l *Log) RemoveWatcher(w Watcher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, have := range l.watchers {
		if have == w {
			last := len(l.watchers) - 1
			l.watchers[i] = l.watchers[last]
			l.watchers[last] = nil
			l.watchers = l.watchers[:last]
			if last == 0 {
				l.watchers = nil // an unwatched log holds nothing
			}
			return
		}
	}
}

// Watchers is the number of registered Watchers (tests: a session that
// has ended must not stay registered).
func (l *Log) Watchers() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.watchers)
}

// tellWatchersLocked tells every Watcher of a change; l.mu must be held.
func (l *Log) tellWatchersLocked() {
	for _, w := range l.watchers {
		w.LogChanged()
	}
}
