// A worker process for the tests that kill or signal one. Reads
// REDRIVE_URL, REDRIVE_TOKEN, QUEUE, KIND and MODE from its environment and
// writes one JSON line per event on standard output:
//   MODE=hang:     the handler never ends (until its signal aborts);
//   MODE=graceful: the handler ends with {"graceful": true} once the
//                  process got SIGTERM (the worker stops leasing first).
import { Worker } from "../dist/index.js";

const say = (event) => process.stdout.write(JSON.stringify(event) + "\n");
const { REDRIVE_URL: url, REDRIVE_TOKEN: token, QUEUE: queue, KIND: kind, MODE: mode } = process.env;

const worker = new Worker({ url, token, queues: [queue], concurrency: 2, gracePeriodMs: 20_000 });
let terminated;
const sigterm = new Promise((resolve) => (terminated = resolve));
process.on("SIGTERM", () => terminated());

worker.handle(kind, async (job, { signal }) => {
  say({ event: "started", id: job.id, lease: job.lease, attempt: job.attempt, worker: worker.name });
  if (mode === "graceful") {
    await sigterm;
    return { graceful: true };
  }
  await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
  throw signal.reason;
});
say({ event: "running", worker: worker.name, pid: process.pid });
await worker.run();
say({ event: "stopped" });
