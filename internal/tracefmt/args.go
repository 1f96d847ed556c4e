package tracefmt

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Args are the key=value arguments of a script command; a bare key is
// "true".
type Args map[string]string

// ParseArgs parses a command's fields after its name.
func ParseArgs(fields []string) Args {
	args := Args{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			v = "true"
		}
		args[k] = v
	}
	return args
}

// Int is argument k as a number, def when absent; a script with a value
// that is not a number panics (a broken script, not a failing test).
func (a Args) Int(k string, def int) int {
	v, ok := a[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		panic(fmt.Sprintf("%s=%s: %v", k, v, err))
	}
	return n
}

// OptString is argument k, nil when absent.
func (a Args) OptString(k string) *string {
	if v, ok := a[k]; ok {
		return &v
	}
	return nil
}

// MustDuration parses a script's duration ("1.5s"), panicking on a
// broken script.
func MustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}
