package api

import (
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/acl"
	"github.com/sushka-io/sushka/internal/server"
)

// DescribeLogDirs: v0-5
//
// Behavior:
// * One log directory, the data directory, with every requested partition
//   (all on a null topic list) and its size on disk (plog.Size). OffsetLag
//   is 0: there are no future replicas.
// * A partition named more than once is listed once, as Kafka does (it
//   collects the requested partitions in a set).
// * v4+: TotalBytes / UsableBytes of the data directory's filesystem
//   (statfs), -1 when unknown.
//
// Version notes:
// * v1: no change; v2: flexible versions; v3: top-level ErrorCode
// * v4: TotalBytes, UsableBytes; v5: IsCordoned (never)

func init() { regKey(35, 0, 5, replyingFor((*Handler).handleDescribeLogDirs)) }

func (h *Handler) handleDescribeLogDirs(creq *server.Request, req *kmsg.DescribeLogDirsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	if !h.allowedCluster(creq, acl.Describe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code // v3+; before, no dirs
		return resp
	}
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir, _ = filepath.Abs(h.cfg.DataDir)
	dir.TotalBytes, dir.UsableBytes = -1, -1
	var st unix.Statfs_t
	if err := unix.Statfs(h.cfg.DataDir, &st); err == nil {
		dir.TotalBytes = int64(st.Blocks) * st.Bsize
		dir.UsableBytes = int64(st.Bavail) * st.Bsize
	}

	var seen requestPartitions
	add := func(t *topic, partitions []int32) {
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = t.meta.Name
		ti := seen.topic(topicKey{name: t.meta.Name})
		for _, p := range partitions {
			l := t.partition(p)
			if l == nil {
				continue // Kafka omits partitions it does not host
			}
			if _, again := seen.partition(ti, p, 0); again {
				continue
			}
			dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			dp.Partition = p
			dp.Size = l.Size()
			dt.Partitions = append(dt.Partitions, dp)
		}
		if len(dt.Partitions) > 0 {
			dir.Topics = append(dir.Topics, dt)
		}
	}
	if req.Topics == nil {
		for _, t := range h.sortedTopics() {
			ps := make([]int32, len(t.parts))
			for i := range ps {
				ps[i] = int32(i)
			}
			add(t, ps)
		}
	} else {
		for _, rt := range req.Topics {
			if t := h.lookup(rt.Topic); t != nil {
				add(t, rt.Partitions)
			}
		}
	}
	resp.Dirs = append(resp.Dirs, dir)
	return resp
}
