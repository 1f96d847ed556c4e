package plog

import (
	"path"
	"testing"

	"github.com/sushka-io/sushka/internal/plog/batch"
	"github.com/sushka-io/sushka/internal/vfs"
)

// readCheckpointFile returns what the data directory's checkpoint file
// (recoveryPointsFile or logStartsFile) says, by partition (nil: absent or
// unreadable).
func readCheckpointFile(t testing.TB, fs vfs.FS, dataDir, file string) map[string]int64 {
	t.Helper()
	data, err := vfs.ReadFile(fs, path.Join(dataDir, file))
	if err != nil {
		return nil
	}
	m, err := parseCheckpoint(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return m
}

// forgetRecoveryPoint removes a partition's entry from its data
// directory's recovery points, as after a crash before any checkpoint
// named it: nothing is known durable.
func forgetRecoveryPoint(t testing.TB, fs vfs.FS, dir string) {
	t.Helper()
	dataDir, key := path.Dir(dir), checkpointKey(dir)
	m := readCheckpointFile(t, fs, dataDir, recoveryPointsFile)
	entries := map[string]checkpointEntry{}
	for k, v := range m {
		if k != key {
			entries[k] = checkpointEntry{recoveryPoint: v, logStart: -1}
		}
	}
	if err := replaceFile(fs, dataDir, recoveryPointsFile, formatCheckpoint(entries, true)); err != nil {
		t.Fatal(err)
	}
}

// writeFile replaces name's contents with data, durably (file and
// directory synced).
func writeFile(t testing.TB, fs vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir(path.Dir(name)); err != nil {
		t.Fatal(err)
	}
}

// readHeaderAt parses the batch header at pos of file.
func readHeaderAt(file vfs.File, pos int64) (batch.Header, error) {
	b := make([]byte, batch.HeaderSize)
	if _, err := file.ReadAt(b, pos); err != nil {
		return batch.Header{}, err
	}
	return batch.ParseHeader(b)
}
