#!/usr/bin/env node
// kafkajs driven by test/compat/kafkajs_test.go:
//
//   node client.js BOOTSTRAP admin TOPIC PARTITIONS
//   node client.js BOOTSTRAP produce TOPIC PREFIX N CODEC   (CODEC: none, gzip, snappy)
//   node client.js BOOTSTRAP consume TOPIC GROUP MAX SECONDS
//   node client.js BOOTSTRAP groups TOPIC GROUP
//   node client.js BOOTSTRAP txn TOPIC PREFIX N COMMIT(0|1) GROUP INTOPIC INOFFSET
//   node client.js BOOTSTRAP read TOPIC N SECONDS
//   node client.js BOOTSTRAP auth_error
//   node client.js BOOTSTRAP denied OTHER_TOPIC OWN_TOPIC OTHER_GROUP
//
// Every command prints JSON lines on stdout (kafkajs logs go to stderr);
// consume prints the records it got, commits them and disconnects. Any
// error exits non-zero.
//
// $SUSHKA_COMPAT_CONFIG, a JSON object of kafkajs client settings (ssl,
// sasl), is added to the Kafka client's. auth_error and denied print the
// errors kafkajs throws (see their comments), for the security story of
// security_test.go.
'use strict'

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec

const [bootstrap, cmd, ...args] = process.argv.slice(2)

const kafkaConfig = {
  clientId: 'sushka-compat',
  brokers: [bootstrap],
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, level, label, log }) => {
    process.stderr.write(`${label} ${namespace} ${JSON.stringify(log)}\n`)
  },
  retry: { retries: 5, initialRetryTime: 100 },
  ...JSON.parse(process.env.SUSHKA_COMPAT_CONFIG || '{}'),
}
const kafka = new Kafka(kafkaConfig)

const out = (doc) => process.stdout.write(JSON.stringify(doc) + '\n')
const value = (prefix, i) => `${prefix} value ${i} ${'x'.repeat(i % 40)}`

async function admin (topic, partitions) {
  const a = kafka.admin()
  await a.connect()
  try {
    const created = await a.createTopics({ topics: [{ topic, numPartitions: Number(partitions), replicationFactor: 1 }], waitForLeaders: true })
    const again = await a.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] })
    const md = await a.fetchTopicMetadata({ topics: [topic] })
    const topics = await a.listTopics()
    const cluster = await a.describeCluster()
    out({ created, again, partitions: md.topics[0].partitions.length, listed: topics.includes(topic), brokers: cluster.brokers.length })
  } finally {
    await a.disconnect()
  }
}

async function produce (topic, prefix, n, codec) {
  const compression = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy }[codec]
  if (compression === undefined) throw new Error(`codec ${codec}`)
  const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await p.connect()
  try {
    const messages = []
    for (let i = 0; i < Number(n); i++) messages.push({ key: `${prefix}-k${i}`, value: value(prefix, i) })
    let delivered = 0
    for (let i = 0; i < messages.length; i += 50) {
      const res = await p.send({ topic, acks: -1, compression, messages: messages.slice(i, i + 50) })
      for (const r of res) {
        if (r.errorCode !== 0) throw new Error(`produce: ${JSON.stringify(r)}`)
      }
      delivered += messages.slice(i, i + 50).length
    }
    out({ delivered })
  } finally {
    await p.disconnect()
  }
}

async function consume (topic, group, max, seconds) {
  max = Number(max)
  const c = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 200 })
  await c.connect()
  let got = 0
  const next = {} // partition -> next offset to commit
  let done
  const finished = new Promise((resolve) => { done = resolve })
  const timer = setTimeout(() => done(new Error(`consumed ${got} records in ${seconds}s, want ${max}`)), Number(seconds) * 1000)
  await c.subscribe({ topics: [topic], fromBeginning: true })
  await c.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      if (got >= max) return // not committed: the next consumer of the group gets it
      out({ topic, partition, offset: Number(message.offset), key: message.key.toString(), value: message.value.toString() })
      next[partition] = (BigInt(message.offset) + 1n).toString()
      got++
      if (got === max) {
        await c.commitOffsets(Object.entries(next).map(([p, offset]) => ({ topic, partition: Number(p), offset })))
        done(null)
      }
    },
  })
  const err = await finished
  clearTimeout(timer)
  await c.disconnect()
  if (err) throw err
}

async function groups (topic, group) {
  const a = kafka.admin()
  await a.connect()
  try {
    const offsets = await a.fetchOffsets({ groupId: group, topics: [topic] })
    const listed = await a.listGroups()
    const described = await a.describeGroups([group])
    const ends = await a.fetchTopicOffsets(topic)
    out({
      committed: offsets[0].partitions.map((p) => ({ partition: p.partition, offset: Number(p.offset) })),
      ends: ends.map((p) => ({ partition: p.partition, offset: Number(p.high) })),
      listed: listed.groups.filter((g) => g.groupId === group).map((g) => g.protocolType),
      state: described.groups[0].state,
    })
  } finally {
    await a.disconnect()
  }
}

// txn sends N records and the offset INOFFSET of INTOPIC/0 for GROUP
// (sendOffsets) in one transaction, committed or aborted.
async function txn (topic, prefix, n, commit, group, inTopic, inOffset) {
  const p = kafka.producer({ transactionalId: `kafkajs-${prefix}`, idempotent: true, maxInFlightRequests: 1 })
  await p.connect()
  try {
    const t = await p.transaction()
    const messages = []
    for (let i = 0; i < Number(n); i++) messages.push({ key: `${prefix}-k${i}`, value: value(prefix, i) })
    await t.send({ topic, messages })
    await t.sendOffsets({ consumerGroupId: group, topics: [{ topic: inTopic, partitions: [{ partition: 0, offset: inOffset }] }] })
    if (commit === '1') await t.commit()
    else await t.abort()
    out({ ended: commit === '1' ? 'commit' : 'abort', records: Number(n) })
  } finally {
    await p.disconnect()
  }
}

// read prints what a consumer gets, until it has N records or SECONDS
// pass, plus whatever arrives in another second. ISOLATION "uncommitted"
// sets readUncommitted; otherwise kafkajs's default reads committed
// records only.
async function read (topic, n, seconds, isolation) {
  const c = kafka.consumer({ groupId: `kafkajs-read-${Date.now()}`, maxWaitTimeInMs: 200, readUncommitted: isolation === 'uncommitted' })
  await c.connect()
  let got = 0
  let done
  const finished = new Promise((resolve) => { done = resolve })
  const timer = setTimeout(() => done(), Number(seconds) * 1000)
  await c.subscribe({ topics: [topic], fromBeginning: true })
  await c.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      out({ topic, partition, offset: Number(message.offset), key: message.key.toString(), value: message.value.toString() })
      if (++got === Number(n)) setTimeout(() => done(), 1000)
    },
  })
  await finished
  clearTimeout(timer)
  await c.disconnect()
}

// errorDoc is the innermost error of a kafkajs error (a retrier's
// KafkaJSNonRetriableError or KafkaJSNumberOfRetriesExceeded wraps the
// one the broker's answer made).
function errorDoc (err) {
  while (err.cause || err.originalError) err = err.cause || err.originalError
  return { name: err.name, type: err.type, message: err.message }
}

// authError is what admin.connect() throws when the broker refuses the
// credentials.
async function authError () {
  const a = kafka.admin()
  try {
    await a.connect()
  } catch (err) {
    out({ error: errorDoc(err) })
    return
  } finally {
    await a.disconnect()
  }
  throw new Error('admin.connect() with refused credentials succeeded')
}

// denied prints what a tenant gets on another tenant's resources: the
// error of producer.send to OTHER_TOPIC, the error that crashes a consumer
// of OWN_TOPIC in OTHER_GROUP, and the topics admin.listTopics() shows.
async function denied (otherTopic, ownTopic, otherGroup) {
  const p = kafka.producer()
  await p.connect()
  let produce
  try {
    await p.send({ topic: otherTopic, messages: [{ key: 'k', value: 'v' }] })
  } catch (err) {
    produce = errorDoc(err)
  } finally {
    await p.disconnect()
  }
  if (!produce) throw new Error(`producer.send to ${otherTopic} succeeded`)

  // kafkajs tries each broker for the group's coordinator and, when all
  // refused, throws KafkaJSGroupCoordinatorNotFound; what the broker
  // answered it logs at debug level only: collect it.
  const refusals = []
  const debugKafka = new Kafka({
    ...kafkaConfig,
    logLevel: logLevel.DEBUG,
    logCreator: () => ({ log }) => {
      if (log.message === 'Tried to find group coordinator' && log.error) refusals.push(errorDoc(log.error))
    },
  })
  const c = debugKafka.consumer({ groupId: otherGroup, maxWaitTimeInMs: 200, retry: { retries: 2, restartOnFailure: async () => false } })
  let crashed
  const group = new Promise((resolve) => { crashed = resolve })
  c.on(c.events.CRASH, ({ payload }) => crashed(errorDoc(payload.error)))
  const timer = setTimeout(() => crashed(null), 30000)
  await c.connect()
  try {
    await c.subscribe({ topics: [ownTopic], fromBeginning: true })
    await c.run({ eachMessage: async () => { throw new Error(`consumer in ${otherGroup} got a record`) } })
  } catch (err) {
    crashed(errorDoc(err))
  }
  const groupError = await group
  clearTimeout(timer)
  await c.disconnect()
  if (!groupError) throw new Error(`consumer in ${otherGroup} did not fail in 30 s`)

  const a = kafka.admin()
  await a.connect()
  try {
    out({ produce, group: groupError, coordinator: refusals[0], topics: (await a.listTopics()).sort() })
  } finally {
    await a.disconnect()
  }
}

const cmds = { admin, produce, consume, groups, txn, read, auth_error: authError, denied }
cmds[cmd](...args).then(() => process.exit(0), (err) => {
  process.stderr.write(`${err.stack || err}\n`)
  process.exit(1)
})
