package main

// Table output shared by the client commands: aligned columns, "-" for an
// empty cell, and STATUS cells that remember the first failure.

import (
	"fmt"
	"io"
	"text/tabwriter"
)

func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// statusCell returns a STATUS cell: "OK", or err described. The first
// failure is kept in *first, for the command to explain after the table.
func statusCell(err error, first *error) string {
	if err == nil {
		return "OK"
	}
	if *first == nil {
		*first = err
	}
	return describeErr(err, "")
}

// describeEach shows each name in turn, a blank line between, and stops at
// the first error: the shape of every `describe NAME...` command.
func describeEach(w io.Writer, names []string, show func(name string) error) error {
	for i, name := range names {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := show(name); err != nil {
			return err
		}
	}
	return nil
}

// answerFor is the broker's answer about name in a per-name result, or an
// error saying the broker gave none (what names the kind: "group").
func answerFor[T any](answers map[string]T, what, name string) (T, error) {
	a, ok := answers[name]
	if !ok {
		return a, fmt.Errorf("%s %s: no answer from the broker", what, name)
	}
	return a, nil
}
