package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestHostileEveryAdvertisedKeyIsDispatched checks the API key registry end
// to end: every key ApiVersions advertises is answered at its lowest and
// highest version (a response that decodes, not a closed connection), and a
// key it does not advertise, or a version outside the advertised range, closes
// the connection as Kafka does. A key advertised without a handler, or
// dispatched without being advertised, fails here.
func TestHostileEveryAdvertisedKeyIsDispatched(t *testing.T) {
	addr := startTestBroker(t, Config{}).addr
	c := dialRaw(t, addr)
	avReq := kmsg.NewPtrApiVersionsRequest()
	avReq.Version = 3
	r, err := c.roundTrip(avReq, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	av := r.(*kmsg.ApiVersionsResponse)
	if av.ErrorCode != 0 || len(av.ApiKeys) == 0 {
		t.Fatalf("ApiVersions: error %d, %d keys", av.ErrorCode, len(av.ApiKeys))
	}
	advertised := map[int16]kmsg.ApiVersionsResponseApiKey{}
	for _, k := range av.ApiKeys {
		if _, dup := advertised[k.ApiKey]; dup {
			t.Errorf("key %d advertised twice", k.ApiKey)
		}
		advertised[k.ApiKey] = k
	}

	for _, k := range av.ApiKeys {
		for _, v := range []int16{k.MinVersion, k.MaxVersion} {
			req := kmsg.RequestForKey(k.ApiKey)
			if req == nil {
				t.Errorf("key %d advertised but unknown to kmsg", k.ApiKey)
				continue
			}
			req.SetVersion(v)
			if p, ok := req.(*kmsg.ProduceRequest); ok {
				p.Acks = 1 // acks=0 is answered by silence
			}
			if _, err := c.roundTrip(req, 10*time.Second); err != nil {
				t.Fatalf("%s v%d (advertised %d..%d): %v", kmsg.NameForKey(k.ApiKey), v, k.MinVersion, k.MaxVersion, err)
			}
		}
	}

	closes := func(key, version int16) {
		t.Helper()
		cc := dialRaw(t, addr)
		req := kmsg.RequestForKey(key)
		var frame []byte
		if req != nil {
			req.SetVersion(version)
			frame = encodeRequest(req, 1)
		} else {
			// A key kmsg does not know: a bare header.
			frame = encodeRequest(&kmsg.ApiVersionsRequest{}, 1)
			frame[4], frame[5] = byte(key>>8), byte(key)
		}
		cc.sendFrame(frame)
		cc.expectClosed(fmt.Sprintf("%s (key %d) v%d", kmsg.NameForKey(key), key, version))
	}
	for key := int16(0); key <= kmsg.MaxKey+1; key++ {
		k, ok := advertised[key]
		if !ok {
			closes(key, 0)
			continue
		}
		if key == 18 {
			continue // ApiVersions answers any version (KIP-511)
		}
		if k.MinVersion > 0 {
			closes(key, k.MinVersion-1)
		}
		closes(key, k.MaxVersion+1)
	}
}
