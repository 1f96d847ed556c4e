package group

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

// groupKeys are the request types internal/api routes to the group
// coordinator (its Handle switch).
var groupKeys = []int16{8, 9, 10, 11, 12, 13, 14, 15, 16, 27, 28, 42, 47, 68, 69}

// TestRequestTypeNotServedIsAnError hands the coordinator every request
// type it does not serve, as a wrong route would: each must come back as
// UNKNOWN_SERVER_ERROR on the wire, in the request's own shape, or as
// ErrUnsupported (the API layer closes the connection), never as a bare
// response whose error code 0 reads as success.
func TestRequestTypeNotServedIsAnError(t *testing.T) {
	s := startService(t, vfs.NewMem())
	defer s.Close()
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		req := kmsg.RequestForKey(key)
		if req == nil || slices.Contains(groupKeys, key) {
			continue
		}
		errresptest.FillOne(req)
		req.SetVersion(req.MaxVersion())
		resp, err := s.Do(context.Background(), "test", "/127.0.0.1", req)
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
			t.Errorf("%s routed to the group coordinator: answered %T with error codes %v, want UNKNOWN_SERVER_ERROR or ErrUnsupported", kmsg.NameForKey(key), resp, codes)
		}
	}
}
