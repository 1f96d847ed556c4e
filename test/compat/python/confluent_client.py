#!/usr/bin/python3
"""confluent-kafka-python (librdkafka) driven by test/compat/librdkafka_test.go.

    confluent_client.py BOOTSTRAP admin TOPIC PARTITIONS
    confluent_client.py BOOTSTRAP produce TOPIC PREFIX N CODEC IDEMPOTENT(0|1)
    confluent_client.py BOOTSTRAP consume TOPIC GROUP MAX SECONDS
    confluent_client.py BOOTSTRAP txn TOPIC PREFIX N COMMIT(0|1)
    confluent_client.py BOOTSTRAP read_committed|read_uncommitted TOPIC SECONDS

Every command prints one JSON document per line on stdout; consume prints
the records it got ({"topic", "partition", "offset", "key", "value"}), then
commits synchronously what it consumed and closes. Errors exit non-zero.
"""
import json
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def out(doc):
    print(json.dumps(doc), flush=True)


def value(prefix, i):
    return "%s value %d %s" % (prefix, i, "x" * (i % 40))


def admin(bootstrap, topic, partitions):
    a = AdminClient({"bootstrap.servers": bootstrap})
    for _, f in a.create_topics([NewTopic(topic, num_partitions=int(partitions), replication_factor=1)]).items():
        f.result(timeout=20)
    md = a.list_topics(topic=topic, timeout=20)
    t = md.topics[topic]
    if t.error is not None:
        raise KafkaException(t.error)
    # A second create of the same name must fail with TOPIC_ALREADY_EXISTS.
    try:
        for _, f in a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).items():
            f.result(timeout=20)
        raise SystemExit("second create_topics of %s succeeded" % topic)
    except KafkaException as e:
        if e.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    out({"topic": topic, "partitions": len(t.partitions), "brokers": len(md.brokers),
         "version": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0]})


def produce(bootstrap, topic, prefix, n, codec, idempotent):
    n = int(n)
    conf = {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20, "acks": "all"}
    if idempotent == "1":
        conf["enable.idempotence"] = True
    p = Producer(conf)
    errors = []
    delivered = [0]

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered[0] += 1

    for i in range(n):
        while True:
            try:
                p.produce(topic, key="%s-k%d" % (prefix, i), value=value(prefix, i), on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(30)
    if left or errors:
        raise SystemExit("produce: %d not delivered, errors: %s" % (left, errors[:5]))
    out({"delivered": delivered[0]})


def consume(bootstrap, topic, group, max_records, seconds):
    max_records, deadline = int(max_records), time.time() + float(seconds)
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
    })
    c.subscribe([topic])
    got = 0
    while got < max_records and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        out({"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
             "key": m.key().decode(), "value": m.value().decode()})
        got += 1
    if got:
        c.commit(asynchronous=False)
    c.close()


def txn(bootstrap, topic, prefix, n, commit):
    """One transaction of N records, committed or aborted."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "py-" + prefix})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(int(n)):
        p.produce(topic, key="%s-k%d" % (prefix, i), value=value(prefix, i))
    if p.flush(30):
        raise SystemExit("txn: records not delivered")
    if commit == "1":
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)
    out({"ended": "commit" if commit == "1" else "abort", "records": int(n)})


def read(bootstrap, isolation, topic, seconds):
    """Every record a consumer of isolation.level ISOLATION (read_committed
    or read_uncommitted; no group commits) gets until it has been idle for
    SECONDS."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "py-" + isolation,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
    })
    c.subscribe([topic])
    idle_until = time.time() + float(seconds)
    while time.time() < idle_until:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        out({"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
             "key": m.key().decode(), "value": m.value().decode()})
        idle_until = time.time() + float(seconds)
    c.close()


def main():
    bootstrap, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    {"admin": admin, "produce": produce, "consume": consume, "txn": txn,
     "read_committed": lambda b, *a: read(b, "read_committed", *a),
     "read_uncommitted": lambda b, *a: read(b, "read_uncommitted", *a)}[cmd](bootstrap, *args)


if __name__ == "__main__":
    main()
