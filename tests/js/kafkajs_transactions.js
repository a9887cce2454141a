// kafkajs's transactional API driven by a program of steps, for tests/integration/test_transactions_kafka_clients.py.
//   node kafkajs_transactions.js BROKERS < program.json
// The program is a JSON list of steps (the same steps the test runs through confluent-kafka and kafka-python):
//   ["init", name, transactionalId, transactionTimeoutMs|null]  a transactional producer, connected
//   ["begin", name]                  producer.transaction(): the open transaction is kept under name
//   ["send", name, topic, partition, value]
//   ["flush", name]                  (kafkajs's send has waited for its acknowledgement already)
//   ["offsets", name, groupId, topic, partition, offset]          transaction.sendOffsets
//   ["commit", name] / ["abort", name]
//   ["sleep", ms]
//   ["read", topic, partitions, sentinel]   a read_committed consumer (a group of its own) from the start of each
//                                           partition until it has read the value `sentinel` on every
//                                           partition: {"read": [values]}
// Prints one JSON line per step: "ok", {"error": kafkajs's error type or name}, or {"read": [...]}.
const { Kafka, logLevel } = require("kafkajs");

const brokers = process.argv[2].split(",");
const kafka = new Kafka({ clientId: "kafkajs-txn", brokers, logLevel: logLevel.NOTHING, retry: { retries: 3 } });

async function readCommitted(topic, partitions, sentinel) {
  const consumer = kafka.consumer({ groupId: `kjs-read-${Date.now()}-${Math.random()}`, readUncommitted: false });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const read = [];
  const done = new Promise((resolve) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        const v = message.value.toString();
        read.push(v);
        if (read.filter((x) => x === sentinel).length >= partitions) resolve();
      },
    });
  });
  const timeout = new Promise((_, reject) =>
    setTimeout(() => reject(new Error(`no sentinel after 30 s, read ${JSON.stringify(read)}`)), 30000),
  );
  try {
    await Promise.race([done, timeout]);
  } finally {
    await consumer.disconnect();
  }
  return read;
}

async function step(s, producers, transactions) {
  const [op, ...a] = s;
  switch (op) {
    case "init": {
      const [name, transactionalId, timeoutMs] = a;
      const options = { transactionalId, idempotent: true, maxInFlightRequests: 1 };
      if (timeoutMs !== null) options.transactionTimeout = timeoutMs;
      const p = kafka.producer(options);
      await p.connect(); // a transactional producer's connect() is its InitProducerId (the fencing point)
      producers[name] = p;
      return "ok";
    }
    case "begin":
      transactions[a[0]] = await producers[a[0]].transaction();
      return "ok";
    case "send": {
      const [name, topic, partition, value] = a;
      await transactions[name].send({ topic, acks: -1, messages: [{ value, partition }] });
      return "ok";
    }
    case "offsets": {
      const [name, groupId, topic, partition, offset] = a;
      await transactions[name].sendOffsets({
        consumerGroupId: groupId,
        topics: [{ topic, partitions: [{ partition, offset: String(offset) }] }],
      });
      return "ok";
    }
    case "flush": // kafkajs's send resolves once the batch is acknowledged: nothing is left to flush
      return "ok";
    case "commit":
      await transactions[a[0]].commit();
      return "ok";
    case "abort":
      await transactions[a[0]].abort();
      return "ok";
    case "sleep":
      await new Promise((r) => setTimeout(r, a[0]));
      return "ok";
    case "read":
      return { read: await readCommitted(a[0], a[1], a[2]) };
    default:
      throw new Error(`unknown step ${op}`);
  }
}

async function main() {
  const program = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const producers = {};
  const transactions = {};
  for (const s of program) {
    let out;
    try {
      out = await step(s, producers, transactions);
    } catch (e) {
      if (s[0] === "read") throw e;
      out = { error: e.type || e.name };
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  }
  for (const p of Object.values(producers)) await p.disconnect().catch(() => {});
}

main()
  .then(() => process.exit(0))
  .catch((e) => {
    process.stderr.write(`kafkajs: ${e.message}\n`);
    process.exit(1);
  });
