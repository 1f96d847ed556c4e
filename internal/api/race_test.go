//go:build race

package api

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation counts of pooled paths are not meaningful.
const raceEnabled = true
