#!/usr/bin/python3
"""kafka-python (Debian's python3-kafka) driven by test/compat/kafkapython_test.go.

    kafka_python_client.py BOOTSTRAP admin TOPIC PARTITIONS
    kafka_python_client.py BOOTSTRAP produce TOPIC PREFIX N CODEC
    kafka_python_client.py BOOTSTRAP consume TOPIC GROUP MAX SECONDS
    kafka_python_client.py BOOTSTRAP groups TOPIC GROUP
    kafka_python_client.py BOOTSTRAP auth_error
    kafka_python_client.py BOOTSTRAP denied OTHER_TOPIC OWN_TOPIC OTHER_GROUP

Every command prints JSON lines on stdout; consume prints the records it got,
commits them synchronously and closes. Errors exit non-zero.

$SUSHKA_COMPAT_CONFIG, a JSON object of kafka-python settings
(security_protocol, sasl_mechanism, ...), is added to the settings of every
client. auth_error and denied print what kafka-python raises and logs (see
their doc strings), for the security story of security_test.go.
"""
import json
import logging
import os
import sys
import time

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata


EXTRA_CONFIG = json.loads(os.environ.get("SUSHKA_COMPAT_CONFIG") or "{}")


def cfg(**settings):
    """settings with $SUSHKA_COMPAT_CONFIG's added."""
    return dict(settings, **EXTRA_CONFIG)


def out(doc):
    print(json.dumps(doc), flush=True)


def value(prefix, i):
    return "%s value %d %s" % (prefix, i, "x" * (i % 40))


def admin(bootstrap, topic, partitions):
    a = KafkaAdminClient(**cfg(bootstrap_servers=bootstrap, client_id="sushka-compat"))
    try:
        a.create_topics([NewTopic(topic, num_partitions=int(partitions), replication_factor=1)])
        try:
            a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
            raise SystemExit("second create_topics of %s succeeded" % topic)
        except TopicAlreadyExistsError:
            pass
        described = a.describe_topics([topic])
        cluster = a.describe_cluster()
        out({"listed": topic in a.list_topics(),
             "partitions": len(described[0]["partitions"]),
             "brokers": len(cluster["brokers"]),
             "version": kafka.__version__,
             "api_version": ".".join(map(str, a.config["api_version"]))})
    finally:
        a.close()


def produce(bootstrap, topic, prefix, n, codec):
    p = KafkaProducer(**cfg(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                            compression_type=None if codec == "none" else codec))
    futures = [p.send(topic, key=("%s-k%d" % (prefix, i)).encode(), value=value(prefix, i).encode())
               for i in range(int(n))]
    p.flush(30)
    delivered = sum(1 for f in futures if f.get(timeout=30).offset >= 0)
    p.close(10)
    out({"delivered": delivered})


def consume(bootstrap, topic, group, max_records, seconds):
    max_records, deadline = int(max_records), time.time() + float(seconds)
    c = KafkaConsumer(topic, **cfg(bootstrap_servers=bootstrap, group_id=group, client_id="sushka-compat",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   session_timeout_ms=10000, heartbeat_interval_ms=1000, fetch_max_wait_ms=200))
    got, nxt = 0, {}
    while got < max_records and time.time() < deadline:
        for tp, msgs in c.poll(timeout_ms=500, max_records=max_records - got).items():
            for m in msgs:
                out({"topic": m.topic, "partition": m.partition, "offset": m.offset,
                     "key": m.key.decode(), "value": m.value.decode()})
                nxt[tp] = OffsetAndMetadata(m.offset + 1, "")
                got += 1
    if nxt:
        c.commit(nxt)
    c.close()


def groups(bootstrap, topic, group):
    a = KafkaAdminClient(**cfg(bootstrap_servers=bootstrap, client_id="sushka-compat"))
    try:
        offsets = a.list_consumer_group_offsets(group)
        described = a.describe_consumer_groups([group])
        listed = [g for g in a.list_consumer_groups() if g[0] == group]
        out({"committed": [{"partition": tp.partition, "offset": om.offset}
                           for tp, om in sorted(offsets.items()) if tp.topic == topic],
             "listed": [g[1] for g in listed],
             "state": described[0].state})
        a.delete_consumer_groups([group])
        out({"after_delete": [g[0] for g in a.list_consumer_groups() if g[0] == group]})
    finally:
        a.close()


class Captured(logging.Handler):
    """The messages kafka-python logs at WARNING and above."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def auth_error(bootstrap):
    """What a client whose credentials the broker refuses gets: what
    KafkaAdminClient raises and the messages kafka-python logs."""
    captured = Captured()
    logging.getLogger("kafka").addHandler(captured)
    raised = None
    try:
        KafkaAdminClient(**cfg(bootstrap_servers=bootstrap, client_id="sushka-compat",
                               request_timeout_ms=10000, api_version_auto_timeout_ms=10000)).close()
    except KafkaError as e:
        raised = {"class": type(e).__name__, "str": str(e)}
    if raised is None:
        raise SystemExit("KafkaAdminClient with refused credentials connected")
    out({"raised": raised, "log": list(dict.fromkeys(captured.messages))[:5]})


def denied(bootstrap, other_topic, own_topic, other_group):
    """A tenant's attempts on another tenant's resources: what send raises
    for OTHER_TOPIC, the error describe_topics reports for it, what a
    consumer of OWN_TOPIC in OTHER_GROUP raises when it polls, and the
    topics list_topics shows. (kafka-python 2.0.2's producer does not raise
    TopicAuthorizationFailedError: cluster.update_metadata fails an answer
    of one topic with an error before it records the topic as
    unauthorized, so send asks again until max_block_ms.)"""
    def raised(fn):
        try:
            fn()
        except KafkaError as e:
            return {"class": type(e).__name__, "str": str(e)}
        raise SystemExit("%s did not raise" % fn)

    p = KafkaProducer(**cfg(bootstrap_servers=bootstrap, max_block_ms=5000))
    produce = raised(lambda: p.send(other_topic, key=b"k", value=b"v").get(timeout=20))
    p.close(10)
    c = KafkaConsumer(own_topic, **cfg(bootstrap_servers=bootstrap, group_id=other_group, client_id="sushka-compat",
                                       auto_offset_reset="earliest", enable_auto_commit=False))
    group = raised(lambda: c.poll(timeout_ms=20000))
    c.close()
    a = KafkaAdminClient(**cfg(bootstrap_servers=bootstrap, client_id="sushka-compat"))
    topics = sorted(a.list_topics())
    described = a.describe_topics([other_topic])
    a.close()
    code = described[0]["error_code"]
    out({"produce": produce, "group": group, "topics": topics,
         "describe": {"class": kafka.errors.for_code(code).__name__, "str": "error_code %d" % code}})


def main():
    bootstrap, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    {"admin": admin, "produce": produce, "consume": consume, "groups": groups,
     "auth_error": auth_error, "denied": denied}[cmd](bootstrap, *args)


if __name__ == "__main__":
    main()
