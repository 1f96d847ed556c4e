package broker

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestHostileTooManyPartitions: a client creating topics or partitions
// beyond --max-partitions, by CreateTopics, CreatePartitions or
// auto-creation, gets INVALID_PARTITIONS with a message naming the limit
// (as Redpanda answers its partition limits), and nothing is created.
func TestHostileTooManyPartitions(t *testing.T) {
	tb := startBroker(t, Config{MaxPartitions: 10, AutoCreateTopics: Bool(true), DefaultPartitions: 3})
	c := dialRaw(t, tb.AdvertisedAddr())
	rawCreateTopic(t, c, "a", 8)

	create := kmsg.NewPtrCreateTopicsRequest()
	create.Version = 4
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "b", 3, 1
	create.Topics = append(create.Topics, rt)
	var cr kmsg.CreateTopicsResponse
	c.roundTrip(create, &cr)
	if st := cr.Topics[0]; st.ErrorCode != kerr.InvalidPartitions.Code || st.ErrorMessage == nil || !strings.Contains(*st.ErrorMessage, "max-partitions") {
		t.Fatalf("CreateTopics beyond the limit: %v %v", kerr.ErrorForCode(st.ErrorCode), st.ErrorMessage)
	}

	grow := kmsg.NewPtrCreatePartitionsRequest()
	grow.Version = 1
	grow.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: "a", Count: 11}}
	var gr kmsg.CreatePartitionsResponse
	c.roundTrip(grow, &gr)
	if st := gr.Topics[0]; st.ErrorCode != kerr.InvalidPartitions.Code || st.ErrorMessage == nil || !strings.Contains(*st.ErrorMessage, "limit of 10") {
		t.Fatalf("CreatePartitions beyond the limit: %v %v", kerr.ErrorForCode(st.ErrorCode), st.ErrorMessage)
	}

	md := kmsg.NewPtrMetadataRequest()
	md.Version = 4
	md.AllowAutoTopicCreation = true
	name := "auto"
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: &name}}
	var mr kmsg.MetadataResponse
	c.roundTrip(md, &mr)
	if code := mr.Topics[0].ErrorCode; code != kerr.InvalidPartitions.Code {
		t.Fatalf("auto-creation beyond the limit: %v", kerr.ErrorForCode(code))
	}
	if n := tb.catalog.PartitionCount(); n != 8 {
		t.Fatalf("%d partitions exist, want 8", n)
	}
	// Up to the limit is fine.
	rawCreateTopic(t, c, "c", 2)
}
