package txn

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp/errresptest"
	"github.com/sushka-io/sushka/internal/vfs"
)

// txnKeys are the request types internal/api routes to the transaction
// coordinator (its Handle switch).
var txnKeys = []int16{10, 22, 24, 25, 26, 65, 66}

// TestRequestTypeNotServedIsAnError hands the coordinator every request
// type it does not serve, as a wrong route would: each must come back as
// UNKNOWN_SERVER_ERROR on the wire, in the request's own shape, or as
// ErrUnsupported (the API layer closes the connection), never as a bare
// response whose error code 0 reads as success.
func TestRequestTypeNotServedIsAnError(t *testing.T) {
	s := startTxnService(t, vfs.NewMem(), newPartitionsSide())
	defer s.Close()
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		req := kmsg.RequestForKey(key)
		if req == nil || slices.Contains(txnKeys, key) {
			continue
		}
		errresptest.FillOne(req)
		req.SetVersion(req.MaxVersion())
		resp, err := s.Do(context.Background(), req)
		if errors.Is(err, ErrUnsupported) {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(key), err)
		}
		codes, _, err := errresptest.WireCodes(resp)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(key), err)
		}
		if !slices.Contains(codes, kerr.UnknownServerError.Code) {
			t.Errorf("%s routed to the transaction coordinator: answered %T with error codes %v, want UNKNOWN_SERVER_ERROR or ErrUnsupported", kmsg.NameForKey(key), resp, codes)
		}
	}
}
