// A kafkajs consumer-group member through Kafka Lite's Kafka listener, for the seeded nemesis
// (tests/nemesis/kafka_clients.py): runs until SIGTERM, committing as kafkajs does by default, and prints one
// JSON line per record handed to it: {"partition","offset","value"}; kafkajs's crashes go to stderr.
//   node kafkajs_group.js BROKERS TOPIC GROUP
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [brokers, topic, groupId] = process.argv.slice(2);
  const kafka = new Kafka({
    clientId: "kafkajs-nemesis",
    brokers: brokers.split(","),
    logLevel: logLevel.ERROR,
    connectionTimeout: 3000,
    requestTimeout: 5000,
    // Faults last seconds; kafkajs restarts the consumer after a retriable crash, within these retries.
    retry: { retries: 30, initialRetryTime: 200, maxRetryTime: 2000 },
  });
  const consumer = kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 500 });
  consumer.on(consumer.events.CRASH, (e) => {
    process.stderr.write(`crash (restart ${e.payload.restart}): ${e.payload.error.message}\n`);
  });
  // Started while the faults run (ci103: a kill-all closed the connection under connect(), and the member
  // exited with no record): the start is retried as an application would, for up to a minute.
  for (let attempt = 1; ; attempt++) {
    try {
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      break;
    } catch (e) {
      if (attempt >= 60) throw e;
      process.stderr.write(`start failed (attempt ${attempt}): ${e.message}\n`);
      await consumer.disconnect().catch(() => {});
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      process.stdout.write(JSON.stringify({
        partition, offset: parseInt(message.offset, 10), value: message.value.toString(),
      }) + "\n");
    },
  });
  const stop = async () => { await consumer.disconnect().catch(() => {}); process.exit(0); };
  process.on("SIGTERM", stop);
}

main().catch((e) => { process.stderr.write(`kafkajs: ${e.message}\n`); process.exit(1); });
