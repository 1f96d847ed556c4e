//go:build race

package raftnode

// raceEnabled: the race detector slows the scale tests 5–10×; they run
// fewer groups under it (the full count runs without -race).
const raceEnabled = true
