package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The peer wire format. Every frame is
//
//	length  uint32  bytes after this field (frameHeader-4 .. Config.MaxFrameBytes)
//	crc     uint32  CRC-32C (Castagnoli) of kind and body
//	kind    uint8   frameHello or frameBatch
//	body
//
// big endian. A connection carries one direction of one ordered pair of
// nodes: the dialer sends a hello first, then batches; the acceptor only reads.
//
//	hello = version uint8 (1) | from uint64 | to uint64 | cluster uint64
//	batch = count uint32 | count × (group uint64 | flags uint8 | size uint32 | message[size])
//
// message is one raftpb.Message in protobuf. A batch of count 0 is the node
// liveness heartbeat sent once per tick. Anything that does not decode, does
// not check, or names a message type that only a node gives itself closes the
// connection (decodeFrame's errors); it never reaches raft.
const (
	frameHello = 1
	frameBatch = 2

	helloVersion = 1

	frameHeader = 4 + 4 + 1     // length, crc, kind
	helloBody   = 1 + 8 + 8 + 8 // version, from, to, cluster
	entryHeader = 8 + 1 + 4     // group, flags, size
	batchHeader = 4             // count
	lengthField = 4             // the length prefix itself
	minFrame    = frameHeader - lengthField
)

// Message flags, per (group, message) in a batch.
const (
	// flagQuiesce marks the heartbeat a leader sends as it quiesces: the
	// follower quiesces too if it is caught up with it.
	flagQuiesce = 1 << 0
	// flagWake marks a follower's heartbeat response that refuses to
	// quiesce: the leader wakes up and heartbeats again.
	flagWake = 1 << 1

	knownFlags = flagQuiesce | flagWake
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errFrame is the kind of every decoding error: the peer's connection closes.
var errFrame = errors.New("raftnode: bad peer frame")

func frameErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errFrame}, args...)...)
}

// hello is the first frame of a connection.
type hello struct {
	from, to, cluster uint64
}

// inMessage is one decoded message of a batch.
type inMessage struct {
	group uint64
	flags uint8
	msg   *pb.Message
}

// appendHello appends a whole hello frame to dst.
func appendHello(dst []byte, h hello) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeader)...)
	dst[start+8] = frameHello
	dst = append(dst, helloVersion)
	dst = binary.BigEndian.AppendUint64(dst, h.from)
	dst = binary.BigEndian.AppendUint64(dst, h.to)
	dst = binary.BigEndian.AppendUint64(dst, h.cluster)
	return sealFrame(dst, start)
}

// startBatch appends the header of a batch frame; appendBatchEntry adds its
// messages and sealBatch closes it.
func startBatch(dst []byte) []byte {
	dst = append(dst, make([]byte, frameHeader+batchHeader)...)
	dst[len(dst)-batchHeader-1] = frameBatch
	return dst
}

// appendBatchEntry appends one marshalled message to the batch begun at start.
func appendBatchEntry(dst []byte, group uint64, flags uint8, msg []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, group)
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msg)))
	return append(dst, msg...)
}

// sealBatch writes the batch's count, length and checksum.
func sealBatch(dst []byte, start int, count int) []byte {
	binary.BigEndian.PutUint32(dst[start+frameHeader:], uint32(count))
	return sealFrame(dst, start)
}

func sealFrame(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-lengthField))
	binary.BigEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+8:], castagnoli))
	return dst
}

// frameLength checks a frame's length prefix against the limit.
func frameLength(prefix []byte, maxFrameBytes int) (int, error) {
	n := binary.BigEndian.Uint32(prefix)
	if n < minFrame || uint64(n) > uint64(maxFrameBytes) {
		return 0, frameErrorf("frame length %d outside [%d, %d]", n, minFrame, maxFrameBytes)
	}
	return int(n), nil
}

// decodeFrame decodes a frame's bytes after the length prefix: a hello, or a
// batch whose messages are appended to into. It checks everything it can
// without knowing the node: checksum, kind, counts and sizes against the
// frame, protobuf, message types that may come from a peer, flags.
func decodeFrame(frame []byte, into []inMessage) (kind uint8, h hello, msgs []inMessage, err error) {
	if len(frame) < minFrame {
		return 0, h, into, frameErrorf("frame of %d bytes", len(frame))
	}
	if sum := crc32.Checksum(frame[4:], castagnoli); sum != binary.BigEndian.Uint32(frame) {
		return 0, h, into, frameErrorf("checksum %08x, frame says %08x", sum, binary.BigEndian.Uint32(frame))
	}
	kind, body := frame[4], frame[5:]
	switch kind {
	case frameHello:
		if len(body) != helloBody {
			return kind, h, into, frameErrorf("hello of %d bytes", len(body))
		}
		if body[0] != helloVersion {
			return kind, h, into, frameErrorf("hello version %d", body[0])
		}
		h = hello{
			from:    binary.BigEndian.Uint64(body[1:]),
			to:      binary.BigEndian.Uint64(body[9:]),
			cluster: binary.BigEndian.Uint64(body[17:]),
		}
		if h.from == 0 || h.to == 0 {
			return kind, h, into, frameErrorf("hello from node %d to node %d", h.from, h.to)
		}
		return kind, h, into, nil
	case frameBatch:
		msgs, err = decodeBatch(body, into)
		return kind, h, msgs, err
	default:
		return kind, h, into, frameErrorf("frame kind %d", kind)
	}
}

func decodeBatch(body []byte, into []inMessage) ([]inMessage, error) {
	if len(body) < batchHeader {
		return into, frameErrorf("batch of %d bytes", len(body))
	}
	count := binary.BigEndian.Uint32(body)
	body = body[batchHeader:]
	if uint64(count) > uint64(len(body)/entryHeader) {
		return into, frameErrorf("batch of %d messages in %d bytes", count, len(body))
	}
	for i := uint32(0); i < count; i++ {
		if len(body) < entryHeader {
			return into, frameErrorf("message %d: %d bytes left", i, len(body))
		}
		group := binary.BigEndian.Uint64(body)
		flags := body[8]
		size := binary.BigEndian.Uint32(body[9:])
		body = body[entryHeader:]
		if flags&^knownFlags != 0 {
			return into, frameErrorf("message %d: flags %#x", i, flags)
		}
		if uint64(size) > uint64(len(body)) {
			return into, frameErrorf("message %d: size %d, %d bytes left", i, size, len(body))
		}
		m := new(pb.Message)
		if err := proto.Unmarshal(body[:size], m); err != nil {
			return into, frameErrorf("message %d: %v", i, err)
		}
		if err := checkPeerMessage(m); err != nil {
			return into, frameErrorf("message %d: %v", i, err)
		}
		body = body[size:]
		into = append(into, inMessage{group: group, flags: flags, msg: m})
	}
	if len(body) != 0 {
		return into, frameErrorf("%d bytes after the last message", len(body))
	}
	return into, nil
}

// checkPeerMessage refuses what a peer may not send: message types a node
// only gives itself (MsgHup, MsgBeat, MsgProp since proposals are not
// forwarded, the storage threads' messages, …), unknown types, a missing
// sender or recipient, entries of an unknown type.
func checkPeerMessage(m *pb.Message) error {
	if m.Type == nil || m.To == nil || m.From == nil || m.GetTo() == 0 || m.GetFrom() == 0 {
		return errors.New("message without type, sender or recipient")
	}
	switch m.GetType() {
	case pb.MessageType_MsgApp, pb.MessageType_MsgAppResp,
		pb.MessageType_MsgVote, pb.MessageType_MsgVoteResp,
		pb.MessageType_MsgPreVote, pb.MessageType_MsgPreVoteResp,
		pb.MessageType_MsgSnap,
		pb.MessageType_MsgHeartbeat, pb.MessageType_MsgHeartbeatResp,
		pb.MessageType_MsgTimeoutNow, pb.MessageType_MsgTransferLeader,
		pb.MessageType_MsgReadIndex, pb.MessageType_MsgReadIndexResp:
	default:
		return fmt.Errorf("message type %v from a peer", m.GetType())
	}
	for _, e := range m.Entries {
		if e == nil {
			return errors.New("nil entry")
		}
		switch e.GetType() {
		case pb.EntryType_EntryNormal, pb.EntryType_EntryConfChange, pb.EntryType_EntryConfChangeV2:
		default:
			return fmt.Errorf("entry type %v", e.GetType())
		}
	}
	return nil
}
