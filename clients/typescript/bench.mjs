#!/usr/bin/env node
// Benchmark of the Node.js worker over serve's HTTP worker protocol.
//
//   node bench.mjs [--jobs 100000] [--processes 4] [--concurrency 100]
//                  [--latency-jobs 1000] [--url URL --token TOKEN]
//
// Without --url it starts `redrive serve` on a fresh SQLite database in a
// temporary folder ($REDRIVE_BIN, or a binary built from this repository).
// 1. Throughput: enqueues --jobs no-op jobs (POST /v1/jobs/batch, 1000 a
//    request) before any worker runs, then starts --processes worker
//    processes and times from their start until serve has answered an
//    applied outcome for every job (the API's count checks it): jobs/s.
// 2. Latency: with the workers idle (long-polling), enqueues
//    --latency-jobs jobs one at a time, each once the previous one ran, and
//    measures to its handler's start (clocks of one machine) from the job's
//    enqueued_at (the server's time of the enqueue) and from the moment
//    the enqueue request was sent: p50, p99, max of each.
// Build first (npm run build): it runs dist/.

import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Client, Worker } from "./dist/index.js";

const QUEUE = "bench";
const KIND = "noop";

if (process.env.REDRIVE_BENCH_CHILD === "1") {
  await child();
} else {
  await main();
}

async function child() {
  const { url, token, concurrency } = JSON.parse(process.env.REDRIVE_BENCH_CONFIG);
  // Counts the calls of each route and the items they carried.
  const calls = {};
  const counting = async (input, init) => {
    const path = new URL(String(input)).pathname;
    const t0 = performance.now();
    const res = await fetch(input, init);
    const c = (calls[path] ??= { calls: 0, items: 0, ms: 0 });
    c.calls++;
    c.ms += performance.now() - t0;
    if (path === "/v1/worker/outcomes") {
      c.items += JSON.parse(init.body).outcomes.length;
      // The outcomes applied, for the parent's count of the jobs done.
      const body = await res.clone().json().catch(() => ({}));
      const n = (body.outcomes ?? []).filter((o) => o.status === 200).length;
      if (n > 0) process.send({ type: "completed", n });
    }
    if (path === "/v1/worker/lease") {
      const body = await res.clone().json().catch(() => ({}));
      c.items += body.jobs?.length ?? 0;
    }
    return res;
  };
  const worker = new Worker({ url, token, queues: [QUEUE], concurrency, handleSignals: false, gracePeriodMs: 5000, fetch: counting });
  let latencyMode = false;
  worker.handle(KIND, (job) => {
    if (latencyMode) {
      const startedAt = performance.timeOrigin + performance.now();
      process.send({ type: "latency", id: job.id, startedAt, enqueuedAt: job.enqueuedAt?.getTime() });
    }
    return undefined;
  });
  process.on("message", async (m) => {
    if (m.type === "go") {
      worker.run().catch((err) => {
        console.error(err);
        process.exit(1);
      });
    } else if (m.type === "latency") {
      latencyMode = true;
      process.send({ type: "latency-ready" });
    } else if (m.type === "stop") {
      await worker.stop();
      const cpu = process.cpuUsage();
      process.send({ type: "calls", calls, cpuMs: (cpu.user + cpu.system) / 1000 });
      process.disconnect();
    }
  });
  process.send({ type: "ready" });
}

async function main() {
  const { values } = parseArgs({
    options: {
      jobs: { type: "string", default: "100000" },
      processes: { type: "string", default: "4" },
      concurrency: { type: "string", default: "100" },
      "latency-jobs": { type: "string", default: "1000" },
      url: { type: "string" },
      token: { type: "string" },
    },
  });
  const jobs = Number(values.jobs);
  const processes = Number(values.processes);
  const concurrency = Number(values.concurrency);
  const latencyJobs = Number(values["latency-jobs"]);
  let serve;
  let url = values.url;
  let token = values.token ?? process.env.REDRIVE_TOKEN;
  if (!url) {
    const { startServe } = await import("./tests/serve.mjs");
    serve = await startServe();
    ({ url, token } = serve);
  }
  const client = new Client({ url, token });
  try {
    const t0 = performance.now();
    for (let i = 0; i < jobs; i += 1000) {
      const n = Math.min(1000, jobs - i);
      await client.enqueueMany(Array.from({ length: n }, () => ({ kind: KIND, queue: QUEUE })));
    }
    const insertS = (performance.now() - t0) / 1000;
    console.log(`enqueued ${jobs} jobs in ${insertS.toFixed(2)} s (${Math.round(jobs / insertS)} jobs/s, batches of 1000)`);

    const children = [];
    for (let i = 0; i < processes; i++) {
      const c = fork(fileURLToPath(import.meta.url), [], {
        env: { ...process.env, REDRIVE_BENCH_CHILD: "1", REDRIVE_BENCH_CONFIG: JSON.stringify({ url, token, concurrency }) },
      });
      await new Promise((resolve) => c.once("message", resolve)); // ready
      children.push(c);
    }
    // The end: the workers' applied outcomes add up to the jobs (each
    // child tells of the outcomes serve answered applied). Polling the
    // API's count instead took a third of serve's CPU on 2 cores (a
    // count of the completed jobs every 50 ms), slowing what it measures.
    let completed = 0;
    let allDone;
    const done = new Promise((resolve) => (allDone = resolve));
    for (const c of children) {
      c.on("message", (m) => {
        if (m.type !== "completed") return;
        completed += m.n;
        if (completed >= jobs) allDone();
      });
    }
    const start = performance.now();
    for (const c of children) c.send({ type: "go" });
    await done;
    const burnS = (performance.now() - start) / 1000;
    const count = async (state) => {
      const res = await fetch(`${url}/v1/jobs/count?queue=${QUEUE}&state=${state}`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
      return (await res.json()).count;
    };
    const counted = await count("completed");
    if (counted !== jobs) throw new Error(`the workers were answered ${completed} outcomes applied, the API counts ${counted} jobs completed of ${jobs}`);
    console.log(
      `burned down ${jobs} no-op jobs with ${processes} processes x ${concurrency} handlers in ${burnS.toFixed(2)} s: ${Math.round(jobs / burnS)} jobs/s`,
    );

    if (latencyJobs > 0) {
      const fromEnqueued = [];
      const fromRequest = [];
      let waiting;
      for (const c of children) {
        c.on("message", (m) => {
          if (m.type === "latency") waiting?.(m);
        });
        c.send({ type: "latency" });
      }
      // Let every worker's lease call be in its long-poll before the first job.
      await new Promise((r) => setTimeout(r, 500));
      for (let i = 0; i < latencyJobs; i++) {
        const ran = new Promise((resolve) => (waiting = resolve));
        const sent = performance.timeOrigin + performance.now();
        const job = await client.enqueue({ kind: KIND, queue: QUEUE });
        const m = await ran;
        if (m.id !== job.id) throw new Error(`latency: job ${m.id} ran, ${job.id} expected`);
        fromRequest.push(m.startedAt - sent);
        if (m.enqueuedAt !== undefined) fromEnqueued.push(m.startedAt - m.enqueuedAt);
      }
      const report = (what, samples) => {
        if (samples.length === 0) return;
        samples.sort((a, b) => a - b);
        const q = (p) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))].toFixed(2);
        console.log(`  ${what}: p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${q(1)} ms`);
      };
      console.log(`latency to the handler's start, ${latencyJobs} jobs enqueued one at a time while the workers long-poll:`);
      report("from enqueued_at", fromEnqueued);
      report("from sending the enqueue request", fromRequest);
    }
    const totals = {};
    let cpuMs = 0;
    await Promise.all(
      children.map(
        (c) =>
          new Promise((resolve) => {
            c.on("message", (m) => {
              if (m.type !== "calls") return;
              cpuMs += m.cpuMs;
              for (const [path, v] of Object.entries(m.calls)) {
                const t = (totals[path] ??= { calls: 0, items: 0, ms: 0 });
                t.calls += v.calls;
                t.items += v.items;
                t.ms += v.ms;
              }
            });
            c.once("exit", resolve);
            c.send({ type: "stop" });
          }),
      ),
    );
    const handled = jobs + latencyJobs;
    console.log(
      `CPU of the worker processes, all phases: ${(cpuMs / 1000).toFixed(2)} s in all, ` +
        `${((cpuMs * 1000) / handled).toFixed(0)} µs a job (${handled} jobs)`,
    );
    console.log("calls of the worker processes, all phases:");
    for (const [path, t] of Object.entries(totals).sort()) {
      const wait = path === "/v1/worker/lease" || path === "/v1/worker/cancels" ? " (long-polls included)" : "";
      console.log(
        `  ${path}: ${t.calls} calls${t.items ? `, ${(t.items / t.calls).toFixed(1)} items a call` : ""}, ` +
          `${(t.ms / t.calls).toFixed(1)} ms a call until its answer's headers${wait}`,
      );
    }
  } finally {
    await serve?.stop();
  }
}
