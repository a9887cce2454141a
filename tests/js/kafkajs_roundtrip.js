// kafkajs against Kafka Lite's Kafka listener, for tests/integration/test_kafka_clients.py.
//   node kafkajs_roundtrip.js BROKERS TOPIC N [produce|consume|both] [partitions]
// produce: create TOPIC with its admin (if missing), send N keyed records with a header, acks=all;
// consume: read N records from the beginning in a fresh group; prints one JSON line per record read:
// {"partition","offset","key","value","headers"} and finally {"done": count}.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [brokers, topic, nArg, mode = "both", partsArg = "3"] = process.argv.slice(2);
  const n = parseInt(nArg, 10);
  const kafka = new Kafka({ clientId: "kafkajs-test", brokers: brokers.split(","), logLevel: logLevel.ERROR });
  if (mode !== "consume") {
    const admin = kafka.admin();
    await admin.connect();
    const existing = await admin.listTopics();
    if (!existing.includes(topic)) {
      await admin.createTopics({ topics: [{ topic, numPartitions: parseInt(partsArg, 10), replicationFactor: 3 }], waitForLeaders: true });
    }
    await admin.disconnect();
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    for (let start = 0; start < n; start += 500) {
      const messages = [];
      for (let i = start; i < Math.min(n, start + 500); i++) {
        messages.push({ key: `k${i}`, value: `kafkajs-${i}`, headers: { n: `${i}` } });
      }
      await producer.send({ topic, acks: -1, messages });
    }
    await producer.disconnect();
  }
  if (mode !== "produce") {
    const consumer = kafka.consumer({ groupId: `kafkajs-${topic}-${Date.now()}` });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    let count = 0;
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`read only ${count} of ${n}`)), 60000);
      consumer.run({
        eachMessage: async ({ partition, message }) => {
          const headers = {};
          for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v.toString();
          process.stdout.write(JSON.stringify({
            partition, offset: parseInt(message.offset, 10), key: message.key ? message.key.toString() : null,
            value: message.value.toString(), headers, timestamp: parseInt(message.timestamp, 10),
          }) + "\n");
          count += 1;
          if (count >= n) { clearTimeout(timer); resolve(); }
        },
      }).catch(reject);
    });
    await consumer.disconnect();
    process.stdout.write(JSON.stringify({ done: count }) + "\n");
  }
}

main().catch((e) => { process.stderr.write(`kafkajs: ${e.message}\n`); process.exit(1); });
