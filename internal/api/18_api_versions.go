package api

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/txn"
)

// ApiVersions: v0-5
//
// Behavior:
// * Lists every key registered by the NN_*.go files with its version range.
// * A version above ours gets the KIP-511 answer: a v0 response with
//   UNSUPPORTED_VERSION and our ApiVersions range, so the client retries at a
//   version we serve (the server does not decode such a body).
// * v5: a request naming another cluster or node gets REBOOTSTRAP_REQUIRED
//   (KIP-1242).
// * v3+: the features (KIP-584) in finalizedFeatures, supported and
//   finalized at the same level (one node, nothing to upgrade).
//
// Version notes:
// * v1: ThrottleMillis
// * v3: ClientSoftwareName/Version, flexible versions, features (tagged)
// * v5: ClusterID, NodeID in the request

func init() { regKey(18, 0, 5, replying((*Handler).handleApiVersions)) }

// finalizedFeatures are the cluster features this broker reports (Kafka's
// names and levels). transaction.version 2 is KIP-890 part 2: clients end
// every transaction with an epoch bump (EndTxn v5) and let Produce v12+ and
// TxnOffsetCommit v5+ add partitions implicitly (internal/txn).
var finalizedFeatures = []struct {
	name  string
	level int16
}{
	{"transaction.version", txn.TransactionVersion},
}

func (h *Handler) handleApiVersions(req *kmsg.ApiVersionsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	own := servedKey(18)
	if req.Version > own.maxVersion {
		resp.Version = 0
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = 18, own.minVersion, own.maxVersion
		resp.ApiKeys = append(resp.ApiKeys, k)
		return resp
	}
	if req.Version >= 5 && req.ClusterID != nil && (*req.ClusterID != h.clusterID() || req.NodeID != h.cfg.NodeID) {
		resp.ErrorCode = kerr.RebootstrapRequired.Code
		return resp
	}
	if req.Version >= 3 {
		resp.FinalizedFeaturesEpoch = 0
		for _, f := range finalizedFeatures {
			sf := kmsg.NewApiVersionsResponseSupportedFeature()
			sf.Name, sf.MinVersion, sf.MaxVersion = f.name, 0, f.level
			resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
			ff := kmsg.NewApiVersionsResponseFinalizedFeature()
			ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = f.name, f.level, f.level
			resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
		}
	}
	for key, v := range apiKeys { // in key order
		if v == nil || v.clusterOnly && !h.clusterMode() {
			continue
		}
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = int16(key), v.minVersion, v.maxVersion
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
