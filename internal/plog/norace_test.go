//go:build !race

package plog

const raceEnabled = false
