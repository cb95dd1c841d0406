#!/usr/bin/env node
// Benchmark of the Node.js worker over serve's HTTP worker protocol.
//
//   node bench.mjs [--jobs 100000] [--processes 4] [--concurrency 100]
//                  [--latency-jobs 1000] [--transport http|fetch]
//                  [--url URL --token TOKEN]
//
// --transport: the workers' transport, node:http (the client's default)
// or the global fetch (ConnectionOptions.fetch), to compare them.
// Without --url it starts `redrive serve` on a fresh SQLite database in a
// temporary folder ($REDRIVE_BIN, or a binary built from this repository).
// 1. Throughput: enqueues --jobs no-op jobs (POST /v1/jobs/batch, 1000 a
//    request) before any worker runs, then starts --processes worker
//    processes and times from their start until serve has answered an
//    applied outcome for every job (the API's count checks it): jobs/s.
// 2. Latency: with the workers idle (long-polling), enqueues
//    --latency-jobs jobs one at a time, each once the previous one's
//    complete was applied (no outcome's commit in the way), and
//    measures, p50, p99 and max of each, the same quantities as bench.py:
//    the job's attempted_at - created_at (the server's clock: its lease's
//    update minus its enqueue), and to its handler's start (clocks of one
//    machine) from the job's enqueued_at (the server's time of the
//    enqueue, to the microsecond) and from the moment the enqueue request
//    was sent.
// Build first (npm run build): it runs dist/.

import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Client, Worker } from "./dist/index.js";

const QUEUE = "bench";
const KIND = "noop";

/** Milliseconds since the epoch of an RFC 3339 time, to the microsecond (Date.parse stops at the millisecond). */
function epochMs(s) {
  const m = /^(.*?)(\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(s);
  if (!m) return Date.parse(s);
  return Date.parse(m[1] + m[4]) + (m[3] ? Number(`0.${m[3]}`) * 1000 : 0);
}

if (process.env.REDRIVE_BENCH_CHILD === "1") {
  await child();
} else {
  await main();
}

async function child() {
  const { url, token, concurrency, transport } = JSON.parse(process.env.REDRIVE_BENCH_CONFIG);
  // Counts the calls of each route and the items they carried (the
  // transport's observe hook: the answers decoded once, by the client).
  const calls = {};
  const enqueuedAt = new Map(); // job id -> enqueued_at as the lease answered it (latency mode)
  let latencyMode = false;
  const observe = ({ path, request, answer, ms }) => {
    const c = (calls[path] ??= { calls: 0, items: 0, ms: 0 });
    c.calls++;
    c.ms += ms;
    if (path === "/v1/worker/outcomes") {
      c.items += request?.outcomes?.length ?? 0;
      // The outcomes applied, for the parent's count of the jobs done.
      const n = (answer?.outcomes ?? []).filter((o) => o.status === 200).length;
      if (n > 0) process.send({ type: "completed", n });
    }
    if (path === "/v1/worker/lease") {
      c.items += answer?.jobs?.length ?? 0;
      if (latencyMode) for (const j of answer?.jobs ?? []) enqueuedAt.set(j.id, j.enqueued_at);
    }
  };
  const worker = new Worker({ url, token, queues: [QUEUE], concurrency, handleSignals: false, gracePeriodMs: 5000, observe, ...(transport === "fetch" ? { fetch: globalThis.fetch } : {}) });
  worker.handle(KIND, (job) => {
    if (latencyMode) {
      const startedAt = performance.timeOrigin + performance.now();
      const at = enqueuedAt.get(job.id);
      enqueuedAt.delete(job.id);
      process.send({ type: "latency", id: job.id, startedAt, enqueuedAt: at ? epochMs(at) : job.enqueuedAt?.getTime() });
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
      transport: { type: "string", default: "http" },
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
        env: { ...process.env, REDRIVE_BENCH_CHILD: "1", REDRIVE_BENCH_CONFIG: JSON.stringify({ url, token, concurrency, transport: values.transport }) },
      });
      await new Promise((resolve) => c.once("message", resolve)); // ready
      children.push(c);
    }
    // The end: the workers' applied outcomes add up to the jobs (each
    // child tells of the outcomes serve answered applied). Polling the
    // API's count instead took a third of serve's CPU on 2 cores (a
    // count of the completed jobs every 50 ms), slowing what it measures.
    let completed = 0;
    let applied; // the latency phase's wait for the job's complete applied
    let allDone;
    const done = new Promise((resolve) => (allDone = resolve));
    for (const c of children) {
      c.on("message", (m) => {
        if (m.type !== "completed") return;
        completed += m.n;
        if (completed >= jobs) allDone();
        applied?.();
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
      const serverSide = [];
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
        // Each job is enqueued once the previous one's complete was
        // applied: a worker idle in its long-poll, and no outcome's
        // commit ahead of the enqueue's in the store's writer.
        if (completed < jobs + i) await new Promise((resolve) => (applied = () => completed >= jobs + i && resolve()));
        applied = undefined;
        const ran = new Promise((resolve) => (waiting = resolve));
        const sent = performance.timeOrigin + performance.now();
        const job = await client.enqueue({ kind: KIND, queue: QUEUE });
        const m = await ran;
        if (m.id !== job.id) throw new Error(`latency: job ${m.id} ran, ${job.id} expected`);
        fromRequest.push(m.startedAt - sent);
        if (m.enqueuedAt !== undefined) fromEnqueued.push(m.startedAt - m.enqueuedAt);
        const leased = await client.get(job.id); // leased: attempted_at is set
        serverSide.push(epochMs(leased.attempted_at) - epochMs(leased.created_at));
      }
      const report = (what, samples) => {
        if (samples.length === 0) return;
        samples.sort((a, b) => a - b);
        const q = (p) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))].toFixed(2);
        console.log(`  ${what}: p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${q(1)} ms`);
      };
      console.log(`latency to the handler's start, ${latencyJobs} jobs enqueued one at a time while the workers long-poll:`);
      report("attempted_at - created_at (server clock)", serverSide);
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
          `${(t.ms / t.calls).toFixed(1)} ms a call until its whole answer${wait}`,
      );
    }
  } finally {
    await serve?.stop();
  }
}
