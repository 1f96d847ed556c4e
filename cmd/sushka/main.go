// Command sushka is Sushka's single binary: the broker (serve), CLI helpers
// in the style of rpk/kcat (topic, produce, consume) and, later, bench.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// rootCmd is the root of the command tree; each subcommand file adds itself
// in an init function.
var rootCmd = &cobra.Command{
	Use:           "sushka",
	Short:         "Sushka: a durable, fast streaming platform speaking the Kafka protocol",
	Version:       version,
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sushka:", err)
		os.Exit(1)
	}
}
