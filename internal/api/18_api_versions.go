package api

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
//
// Version notes:
// * v1: ThrottleMillis
// * v3: ClientSoftwareName/Version, flexible versions, features (tagged)
// * v5: ClusterID, NodeID in the request

func init() { regKey(18, 0, 5, replying((*Handler).handleApiVersions)) }

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
	if req.Version >= 5 && req.ClusterID != nil && (*req.ClusterID != h.cfg.Catalog.ClusterID() || req.NodeID != h.cfg.NodeID) {
		resp.ErrorCode = kerr.RebootstrapRequired.Code
		return resp
	}
	for key, v := range apiKeys { // in key order
		if v == nil {
			continue
		}
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = int16(key), v.minVersion, v.maxVersion
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
