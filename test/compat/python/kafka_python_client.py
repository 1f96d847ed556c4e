#!/usr/bin/python3
"""kafka-python (Debian's python3-kafka) driven by test/compat/kafkapython_test.go.

    kafka_python_client.py BOOTSTRAP admin TOPIC PARTITIONS
    kafka_python_client.py BOOTSTRAP produce TOPIC PREFIX N CODEC
    kafka_python_client.py BOOTSTRAP consume TOPIC GROUP MAX SECONDS
    kafka_python_client.py BOOTSTRAP groups TOPIC GROUP

Every command prints JSON lines on stdout; consume prints the records it got,
commits them synchronously and closes. Errors exit non-zero.
"""
import json
import sys
import time

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata


def out(doc):
    print(json.dumps(doc), flush=True)


def value(prefix, i):
    return "%s value %d %s" % (prefix, i, "x" * (i % 40))


def admin(bootstrap, topic, partitions):
    a = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="sushka-compat")
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
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                      compression_type=None if codec == "none" else codec)
    futures = [p.send(topic, key=("%s-k%d" % (prefix, i)).encode(), value=value(prefix, i).encode())
               for i in range(int(n))]
    p.flush(30)
    delivered = sum(1 for f in futures if f.get(timeout=30).offset >= 0)
    p.close(10)
    out({"delivered": delivered})


def consume(bootstrap, topic, group, max_records, seconds):
    max_records, deadline = int(max_records), time.time() + float(seconds)
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="sushka-compat",
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      session_timeout_ms=10000, heartbeat_interval_ms=1000, fetch_max_wait_ms=200)
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
    a = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="sushka-compat")
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


def main():
    bootstrap, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    {"admin": admin, "produce": produce, "consume": consume, "groups": groups}[cmd](bootstrap, *args)


if __name__ == "__main__":
    main()
