// kafkajs and committed offsets Kafka stores as given, for tests/integration/test_kafka_answers.py.
//   node kafkajs_offsets.js BROKERS TOPIC GROUP reset|past
// TOPIC holds records already. reset: admin.setOffsets(GROUP, 3), then admin.resetOffsets(earliest), which
// commits -2; prints {"fetched": offset} (admin.fetchOffsets) and then reads with a consumer in GROUP until it
// has every record of TOPIC: {"read": [values]}. past: admin.setOffsets(GROUP, 1000), past the log end; a
// consumer in GROUP (fromBeginning false) gets OFFSET_OUT_OF_RANGE, commits the default (-1) and must then
// read the records a producer writes every 300 ms: {"read": [values]} once it has one.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [brokers, topic, groupId, mode] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: "kafkajs-offsets", brokers: brokers.split(","), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const [end] = await admin.fetchTopicOffsets(topic);
  const want = parseInt(end.high, 10);
  if (mode === "reset") {
    await admin.setOffsets({ groupId, topic, partitions: [{ partition: 0, offset: "3" }] });
    await admin.resetOffsets({ groupId, topic, earliest: true });
    const [fetched] = await admin.fetchOffsets({ groupId, topics: [topic] });
    process.stdout.write(JSON.stringify({ fetched: parseInt(fetched.partitions[0].offset, 10) }) + "\n");
  } else {
    await admin.setOffsets({ groupId, topic, partitions: [{ partition: 0, offset: "1000" }] });
  }
  await admin.disconnect();

  const consumer = kafka.consumer({ groupId, retry: { retries: 2 } });
  const crashed = new Promise((_, reject) => consumer.on(consumer.events.CRASH, (e) => reject(e.payload.error)));
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: mode === "reset" });
  const read = [];
  let producer = null;
  let ticker = null;
  const done = new Promise((resolve) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        read.push(message.value.toString());
        if (mode === "past" || read.length >= want) resolve();
      },
    });
  });
  if (mode === "past") {
    producer = kafka.producer();
    await producer.connect();
    let i = 0;
    ticker = setInterval(() => {
      producer.send({ topic, messages: [{ value: `new-${i++}` }] }).catch(() => {});
    }, 300);
  }
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error(`read ${read.length} in 30 s`)), 30000));
  try {
    await Promise.race([done, crashed, timeout]);
  } finally {
    if (ticker) clearInterval(ticker);
    if (producer) await producer.disconnect();
    await consumer.disconnect();
  }
  process.stdout.write(JSON.stringify({ read }) + "\n");
}

main().then(() => process.exit(0)).catch((e) => { process.stderr.write(`kafkajs: ${e.message}\n`); process.exit(1); });
