package plog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The raft log's own small files beside the segments (docs/format.md,
// "raft-state and raft-snapshot"), each replaced atomically with
// Log.replaceFile (temp file, fsync, rename, directory fsync), so a crash
// leaves the old or the new file whole, never a torn one; a leftover
// temp file is removed by recovery.
//
//	raft-state     term u64 | vote u64 | commit u64 | crc32c u32 of the 24 bytes
//	raft-snapshot  index u64 | term u64 | confStateLen u32 | ConfState
//	               (protobuf) | dataLen u32 | data | crc32c u32 of all before
//	raft-conf      version u16 (0) | index u64 | confStateLen u32 |
//	               ConfState (protobuf) | crc32c u32 of all before
//
// Both are big-endian. A file that is present but does not check is
// corruption (a *CorruptionError): the vote it held may have been given,
// and forgetting it could elect two leaders in one term.
const (
	raftStateFile    = "raft-state"
	raftSnapshotFile = "raft-snapshot"
	raftConfFile     = "raft-conf"
	raftStateSize    = 24 + 4
)

var raftCRC = crc32.MakeTable(crc32.Castagnoli)

// raftHardState is etcd's HardState as plain numbers (the protobuf
// structs must not be copied).
type raftHardState struct{ term, vote, commit uint64 }

func encodeRaftState(hs raftHardState) []byte {
	b := make([]byte, 0, raftStateSize)
	b = binary.BigEndian.AppendUint64(b, hs.term)
	b = binary.BigEndian.AppendUint64(b, hs.vote)
	b = binary.BigEndian.AppendUint64(b, hs.commit)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, raftCRC))
}

func decodeRaftState(name string, b []byte) (raftHardState, error) {
	if len(b) != raftStateSize {
		return raftHardState{}, &CorruptionError{File: name, Reason: fmt.Sprintf("%d bytes, want %d", len(b), raftStateSize)}
	}
	if got, want := binary.BigEndian.Uint32(b[24:]), crc32.Checksum(b[:24], raftCRC); got != want {
		return raftHardState{}, &CorruptionError{File: name, Reason: fmt.Sprintf("crc mismatch: stored 0x%08x, computed 0x%08x", got, want)}
	}
	return raftHardState{
		term:   binary.BigEndian.Uint64(b[0:]),
		vote:   binary.BigEndian.Uint64(b[8:]),
		commit: binary.BigEndian.Uint64(b[16:]),
	}, nil
}

// raftSnapshot is the metadata and data of the latest snapshot.
type raftSnapshot struct {
	index, term uint64
	confState   []byte // protobuf of the ConfState
	data        []byte
}

func encodeRaftSnapshot(s raftSnapshot) []byte {
	b := make([]byte, 0, 28+len(s.confState)+len(s.data))
	b = binary.BigEndian.AppendUint64(b, s.index)
	b = binary.BigEndian.AppendUint64(b, s.term)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.confState)))
	b = append(b, s.confState...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.data)))
	b = append(b, s.data...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, raftCRC))
}

func decodeRaftSnapshot(name string, b []byte) (raftSnapshot, error) {
	bad := func(reason string) (raftSnapshot, error) {
		return raftSnapshot{}, &CorruptionError{File: name, Reason: reason}
	}
	body, reason := checkedBody(b, 28, -1)
	if reason != "" {
		return bad(reason)
	}
	s := raftSnapshot{index: binary.BigEndian.Uint64(body), term: binary.BigEndian.Uint64(body[8:])}
	n := int(binary.BigEndian.Uint32(body[16:]))
	if 20+n+4 > len(body) {
		return bad("conf state runs past the end")
	}
	s.confState = body[20 : 20+n]
	m := int(binary.BigEndian.Uint32(body[20+n:]))
	if 24+n+m != len(body) {
		return bad("data length does not match the file")
	}
	s.data = body[24+n:]
	var cs pb.ConfState
	if err := proto.Unmarshal(s.confState, &cs); err != nil {
		return bad("conf state: " + err.Error())
	}
	return s, nil
}

// checkedBody is b without its trailing CRC-32C, or the reason b does not
// check: shorter than minLen, a CRC mismatch, or (version >= 0) a leading
// u16 version other than version.
func checkedBody(b []byte, minLen, version int) (body []byte, reason string) {
	if len(b) < minLen {
		return nil, fmt.Sprintf("%d bytes, too short", len(b))
	}
	body = b[:len(b)-4]
	if got, want := binary.BigEndian.Uint32(b[len(b)-4:]), crc32.Checksum(body, raftCRC); got != want {
		return nil, fmt.Sprintf("crc mismatch: stored 0x%08x, computed 0x%08x", got, want)
	}
	if v := binary.BigEndian.Uint16(body); version >= 0 && int(v) != version {
		return nil, fmt.Sprintf("version %d, want %d", v, version)
	}
	return body, ""
}

// readRaftFile returns the contents of the directory's file name, nil when
// it is absent.
func readRaftFile(cfg *Config, name string) ([]byte, error) {
	full := path.Join(cfg.Dir, name)
	if _, err := cfg.FS.Stat(full); err != nil {
		return nil, nil
	}
	f, err := cfg.FS.Open(full)
	if err != nil {
		return nil, &IOError{Op: "open " + name, Err: err}
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, &IOError{Op: "stat " + name, Err: err}
	}
	if size > 64<<20 {
		return nil, &CorruptionError{File: full, Reason: fmt.Sprintf("%d bytes, larger than any raft metadata", size)}
	}
	b := make([]byte, size)
	if err := readFull(f, full, b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// raftConf is the ConfState raft reached by applying the configuration
// changes up to entry index (raft-conf): the configuration a restart
// begins with when index is past the snapshot's (docs/replication.md §3e).
type raftConf struct {
	index     uint64
	confState []byte // protobuf of the ConfState
}

const raftConfVersion = 0

func encodeRaftConf(c raftConf) []byte {
	b := make([]byte, 0, 18+len(c.confState))
	b = binary.BigEndian.AppendUint16(b, raftConfVersion)
	b = binary.BigEndian.AppendUint64(b, c.index)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.confState)))
	b = append(b, c.confState...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, raftCRC))
}

func decodeRaftConf(name string, b []byte) (raftConf, error) {
	bad := func(reason string) (raftConf, error) {
		return raftConf{}, &CorruptionError{File: name, Reason: reason}
	}
	body, reason := checkedBody(b, 18, raftConfVersion)
	if reason != "" {
		return bad(reason)
	}
	c := raftConf{index: binary.BigEndian.Uint64(body[2:])}
	if n := int(binary.BigEndian.Uint32(body[10:])); 14+n != len(body) {
		return bad("conf state length does not match the file")
	}
	c.confState = body[14:]
	var cs pb.ConfState
	if err := proto.Unmarshal(c.confState, &cs); err != nil {
		return bad("conf state: " + err.Error())
	}
	return c, nil
}
