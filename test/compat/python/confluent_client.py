#!/usr/bin/python3
"""confluent-kafka-python (librdkafka) driven by test/compat/librdkafka_test.go.

    confluent_client.py BOOTSTRAP admin TOPIC PARTITIONS
    confluent_client.py BOOTSTRAP produce TOPIC PREFIX N CODEC IDEMPOTENT(0|1)
    confluent_client.py BOOTSTRAP consume TOPIC GROUP MAX SECONDS
    confluent_client.py BOOTSTRAP txn TOPIC PREFIX N COMMIT(0|1)
    confluent_client.py BOOTSTRAP read_committed|read_uncommitted TOPIC SECONDS
    confluent_client.py BOOTSTRAP auth_error
    confluent_client.py BOOTSTRAP denied OTHER_TOPIC OWN_TOPIC OTHER_GROUP

Every command prints one JSON document per line on stdout; consume prints
the records it got ({"topic", "partition", "offset", "key", "value"}), then
commits synchronously what it consumed and closes. Errors exit non-zero.

$SUSHKA_COMPAT_CONFIG, a JSON object of librdkafka properties
(security.protocol, sasl.mechanisms, ...), is added to the configuration of
every client. auth_error and denied print the errors librdkafka reports
(see their doc strings), for the security story of security_test.go.
"""
import json
import os
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


EXTRA_CONFIG = json.loads(os.environ.get("SUSHKA_COMPAT_CONFIG") or "{}")


def conf(c):
    """c with $SUSHKA_COMPAT_CONFIG's properties added."""
    return dict(c, **EXTRA_CONFIG)


def out(doc):
    print(json.dumps(doc), flush=True)


def value(prefix, i):
    return "%s value %d %s" % (prefix, i, "x" * (i % 40))


def admin(bootstrap, topic, partitions):
    a = AdminClient(conf({"bootstrap.servers": bootstrap}))
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
    settings = {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20, "acks": "all"}
    if idempotent == "1":
        settings["enable.idempotence"] = True
    p = Producer(conf(settings))
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
    c = Consumer(conf({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
    }))
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
    p = Producer(conf({"bootstrap.servers": bootstrap, "transactional.id": "py-" + prefix}))
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
    c = Consumer(conf({
        "bootstrap.servers": bootstrap,
        "group.id": "py-" + isolation,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
    }))
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


def error_doc(err):
    return {"name": err.name(), "code": err.code(), "str": err.str()}


def auth_error(bootstrap):
    """What a client whose credentials the broker refuses gets: what
    list_topics raises, and the first error librdkafka reports to error_cb
    (served by poll)."""
    errors = []
    p = Producer(conf({"bootstrap.servers": bootstrap, "error_cb": errors.append}))
    raised = None
    try:
        p.list_topics(timeout=10)
    except KafkaException as e:
        raised = error_doc(e.args[0])
    deadline = time.time() + 10
    while not errors and time.time() < deadline:
        p.poll(0.5)  # error_cb is served by poll
    if not errors:
        raise SystemExit("list_topics with refused credentials reported no error (raised %s)" % raised)
    out({"error": error_doc(errors[0]), "raised": raised})


def denied(bootstrap, other_topic, own_topic, other_group):
    """A tenant's attempts on another tenant's resources: the delivery
    error of a record produced to OTHER_TOPIC, the error a consumer of
    OWN_TOPIC in OTHER_GROUP polls, and the topics list_topics shows."""
    p = Producer(conf({"bootstrap.servers": bootstrap}))
    delivery = []
    p.produce(other_topic, key="k", value="v", on_delivery=lambda err, msg: delivery.append(err))
    p.flush(30)
    if len(delivery) != 1 or delivery[0] is None:
        raise SystemExit("produce to %s: delivery reports %s, want one error" % (other_topic, delivery))

    c = Consumer(conf({"bootstrap.servers": bootstrap, "group.id": other_group,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    c.subscribe([own_topic])
    group_error, deadline = None, time.time() + 30
    while group_error is None and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if not m.error():
            raise SystemExit("consumer in %s got a record of %s" % (other_group, own_topic))
        group_error = m.error()
    c.close()
    if group_error is None:
        raise SystemExit("consumer in %s polled no error in 30 s" % other_group)

    topics = sorted(AdminClient(conf({"bootstrap.servers": bootstrap})).list_topics(timeout=20).topics)
    out({"produce": error_doc(delivery[0]), "group": error_doc(group_error), "topics": topics})


def main():
    bootstrap, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    {"admin": admin, "produce": produce, "consume": consume, "txn": txn,
     "auth_error": auth_error, "denied": denied,
     "read_committed": lambda b, *a: read(b, "read_committed", *a),
     "read_uncommitted": lambda b, *a: read(b, "read_uncommitted", *a)}[cmd](bootstrap, *args)


if __name__ == "__main__":
    main()
