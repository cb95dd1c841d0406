// A randomized run of the worker against a model: jobs whose handlers
// complete, fail transient or permanent, snooze, take a while, or wait for
// a cancellation, in a random order chosen by a seed, through one worker
// of concurrency 4 on a real serve. The model says each job's end state
// and handler calls; the run must agree, never run more than 4 handlers at
// once, and never run one job twice at once.

import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { Client, Worker, PermanentError, TransientError, SnoozeError } from "../dist/index.js";
import { startServe, until } from "./serve.mjs";

const MAX_RETRIES = 2;
const CONCURRENCY = 4;
const JOBS = 60;

function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
}

const ACTIONS = ["complete", "slow", "transient", "permanent", "snooze", "hang"];

/** The end state and handler calls of a job whose calls do plan, in order. */
function model(plan) {
  let retries = 0;
  for (let call = 0; call < plan.length; call++) {
    switch (plan[call]) {
      case "complete":
      case "slow":
        return { state: "completed", calls: call + 1 };
      case "permanent":
        return { state: "dead", calls: call + 1 };
      case "hang":
        return { state: "canceled", calls: call + 1 };
      case "transient":
        retries++;
        if (retries > MAX_RETRIES) return { state: "dead", calls: call + 1 };
        break;
      case "snooze":
        break;
    }
  }
  throw new Error("plan too short");
}

test("a randomized run agrees with the model", async (t) => {
  const seed = Number(process.env.REDRIVE_TS_SEED ?? Date.now() % 1_000_000);
  t.diagnostic(`seed ${seed} (REDRIVE_TS_SEED=${seed} to run it again)`);
  const random = rng(seed);
  const serve = await startServe({
    config: { retry: { max_retries: MAX_RETRIES, base: "20ms", multiplier: 1, jitter: "none" } },
  });
  t.after(() => serve.stop());
  const client = new Client({ url: serve.url, token: serve.token });

  // Each job's plan: what its handler does at each call, ending with an
  // action that ends the job (so the plan is never exhausted).
  const plans = [];
  for (let i = 0; i < JOBS; i++) {
    const plan = [];
    for (;;) {
      const a = ACTIONS[Math.floor(random() * ACTIONS.length)];
      plan.push(a);
      if (["complete", "slow", "permanent", "hang"].includes(a)) break;
      if (plan.length > 8) {
        plan.push("complete");
        break;
      }
    }
    plans.push(plan);
  }

  const calls = new Map(); // job id -> calls so far
  const active = new Set();
  let running = 0;
  let maxRunning = 0;
  const problems = [];
  const worker = new Worker({
    url: serve.url,
    token: serve.token,
    queues: ["ts-model"],
    concurrency: CONCURRENCY,
    handleSignals: false,
    onError: (err, where) => {
      if (err?.name !== "LeaseLostError") problems.push(`${where}: ${err}`);
    },
  });
  worker.handle("step", async (job, { signal }) => {
    if (active.has(job.id)) problems.push(`job ${job.id} runs twice at once`);
    active.add(job.id);
    running++;
    maxRunning = Math.max(maxRunning, running);
    try {
      const n = calls.get(job.id) ?? 0;
      calls.set(job.id, n + 1);
      const action = plans[job.payload.i][n];
      switch (action) {
        case "complete":
          return { n };
        case "slow":
          await sleep(Math.floor(random() * 30));
          return { n };
        case "transient":
          throw new TransientError(`call ${n}`);
        case "permanent":
          throw new PermanentError(`call ${n}`);
        case "snooze":
          throw new SnoozeError(10);
        case "hang":
          client.cancel(job.id).catch((err) => problems.push(`cancel ${job.id}: ${err}`));
          await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
          throw signal.reason;
        default:
          throw new Error(`job ${job.id}: no action for call ${n}`);
      }
    } finally {
      running--;
      active.delete(job.id);
    }
  });
  const run = worker.run();
  t.after(() => worker.stop());

  const ids = [];
  for (let i = 0; i < JOBS; i += 20) {
    const batch = await client.enqueueMany(plans.slice(i, i + 20).map((_, k) => ({ kind: "step", queue: "ts-model", payload: { i: i + k } })));
    ids.push(...batch.map((j) => j.id));
  }
  const ended = await until(
    "every job ended",
    async () => {
      const jobs = await Promise.all(ids.map((id) => client.get(id)));
      return jobs.every((j) => ["completed", "dead", "canceled"].includes(j.state)) ? jobs : undefined;
    },
    60_000,
  );
  await worker.stop();
  await run;
  for (const job of ended) {
    const plan = plans[job.payload.i];
    const want = model(plan);
    assert.deepEqual(
      { id: job.id, state: job.state, calls: calls.get(job.id) },
      { id: job.id, state: want.state, calls: want.calls },
      `plan ${plan.join(",")}`,
    );
  }
  assert.ok(maxRunning <= CONCURRENCY, `${maxRunning} handlers at once`);
  assert.deepEqual(problems, []);
});
