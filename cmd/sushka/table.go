package main

// Table output shared by the client commands: aligned columns, "-" for an
// empty cell, and STATUS cells that remember the first failure.

import (
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
