package group

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/errresp/errresptest"
	"github.com/sushka-io/sushka/internal/vfs"
)

// groupKeys are the request types internal/api routes to the group
// coordinator (its Handle switch).
var groupKeys = []int16{8, 9, 10, 11, 12, 13, 14, 15, 16, 27, 28, 42, 47, 68, 69}

// TestRequestTypeNotServedIsAnError hands the coordinator every request
// type it does not serve (errresptest.NotServedIsAnError): UNKNOWN_SERVER_ERROR
// in the request's shape or ErrUnsupported, never error code 0.
func TestRequestTypeNotServedIsAnError(t *testing.T) {
	s := startService(t, vfs.NewMem())
	defer s.Close()
	errresptest.NotServedIsAnError(t, groupKeys, ErrUnsupported, func(req kmsg.Request) (kmsg.Response, error) {
		return s.Do(context.Background(), "test", "/127.0.0.1", req)
	})
}
