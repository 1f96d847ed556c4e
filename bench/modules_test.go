package bench

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestNestedModulesLoad: every module of its own in the repository
// (bench/peers, bench/procpeers, test/natsserver: kept apart so that the
// main go.mod stays lean) loads with its go.mod and go.sum as committed.
// They replace github.com/sushka-io/sushka with the working tree, so a
// requirement the main module raises must be raised in theirs too; nothing
// else builds bench/procpeers, whose go.mod lagged the main module's
// OpenTelemetry and logr versions and failed `go run .` ("updates to go.mod
// needed") until this test.
func TestNestedModulesLoad(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to load the nested modules: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var modules []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && filepath.Dir(path) != root {
			modules = append(modules, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(modules) == 0 {
		t.Fatal("no nested module found: the walk is broken")
	}
	for _, dir := range modules {
		cmd := exec.Command(goCmd, "list", "-mod=readonly", "-deps", "./...")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := cmd.CombinedOutput(); err != nil {
			rel, _ := filepath.Rel(root, dir)
			t.Errorf("%s does not load as committed (cd %s && go mod tidy): %v\n%s", rel, rel, err, out)
		}
	}
}
