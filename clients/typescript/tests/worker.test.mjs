// The worker against a real serve: its protocol's outcomes, retries,
// cancellation, progress, a killed worker's job rescued, late outcomes
// refused, graceful shutdown.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import {
  Client,
  Worker,
  PermanentError,
  TransientError,
  RateLimitedError,
  SnoozeError,
  CanceledError,
  DeadlineError,
  ShutdownError,
  RedriveError,
} from "../dist/index.js";
import { createHash, randomBytes } from "node:crypto";
import { startServe, until, deferred, within } from "./serve.mjs";

// A short policy, so that retries come quickly and exactly: 300 ms, then
// 600 ms, no jitter; a Retry-After taken exactly; a 2 s lease, so that a
// killed worker's job is rescued soon.
const RETRY_BASE = 300;
let serve;
let client;
const readToken = "rdt_" + randomBytes(24).toString("hex");

before(async () => {
  serve = await startServe({
    args: ["--lease", "2s"],
    config: {
      tokens: { reader: { role: "read", sha256: createHash("sha256").update(readToken).digest("hex") } },
      retry: { max_retries: 3, base: `${RETRY_BASE}ms`, multiplier: 2, jitter: "none", after_jitter: "0" },
    },
  });
  client = new Client({ url: serve.url, token: serve.token });
});
after(async () => {
  await serve?.stop();
});

const errors = [];
/** A worker of queue on the test's serve, run until the test's end. */
function startWorker(t, queue, handlers, options = {}) {
  const w = new Worker({
    url: serve.url,
    token: serve.token,
    queues: [queue],
    concurrency: 4,
    handleSignals: false,
    onError: (err, where) => errors.push({ where, err }),
    ...options,
  });
  for (const [kind, fn, hopts] of handlers) w.handle(kind, fn, hopts);
  const running = w.run();
  t.after(() => w.stop());
  return { worker: w, running };
}

async function settled(id, states = ["completed", "dead", "canceled"]) {
  return until(`job ${id} in ${states}`, async () => {
    const job = await client.get(id);
    return states.includes(job.state) ? job : undefined;
  });
}

test("a job completes with the handler's result; the history names the worker", async (t) => {
  const seen = deferred();
  const { worker } = startWorker(t, "ts-ok", [
    ["scan.pdf", async (job) => {
      seen.resolve(job);
      return { pages: job.payload.doc.length };
    }],
  ]);
  const enq = await client.enqueue({ kind: "scan.pdf", queue: "ts-ok", payload: { doc: "a.pdf" } });
  const job = await within("the handler runs", seen.promise, 20_000);
  assert.equal(job.id, enq.id);
  assert.equal(job.kind, "scan.pdf");
  assert.equal(job.queue, "ts-ok");
  assert.equal(job.attempt, 1);
  assert.ok(job.lease > 0);
  const done = await settled(enq.id);
  assert.equal(done.state, "completed");
  assert.equal(done.attempt, 1);
  assert.deepEqual(done.result, { pages: 5 });

  const res = await fetch(`${serve.url}/v1/workers`, { headers: { authorization: `Bearer ${serve.token}` } });
  const { workers } = await res.json();
  const me = workers.find((w) => w.id === worker.name);
  assert.ok(me, `${worker.name} in ${JSON.stringify(workers)}`);
  assert.equal(me.remote, true);
  assert.deepEqual(Object.keys(me.queues), ["ts-ok"]);
  assert.deepEqual(me.kinds, ["scan.pdf"]);
});

test("a transient failure is retried on the policy's schedule", async (t) => {
  const starts = [];
  const third = deferred();
  const { worker } = startWorker(t, "ts-retry", [
    ["flaky", async (job) => {
      starts.push(performance.now());
      if (job.attempt < 3) throw new TransientError(`try ${job.attempt} failed`);
      third.resolve();
      return "ok";
    }],
  ]);
  const enq = await client.enqueue({ kind: "flaky", queue: "ts-retry" });
  await within("the third attempt", third.promise, 20_000);
  const job = await settled(enq.id);
  assert.equal(job.state, "completed");
  assert.equal(job.attempt, 3);
  const retries = job.history.filter((e) => e.kind === "retry");
  assert.equal(retries.length, 2);
  assert.deepEqual(retries.map((e) => e.class), ["transient", "transient"]);
  assert.deepEqual(retries.map((e) => e.delay), [RETRY_BASE, 2 * RETRY_BASE]);
  assert.deepEqual(retries.map((e) => e.error), ["try 1 failed", "try 2 failed"]);
  assert.deepEqual(retries.map((e) => e.worker), [worker.name, worker.name]);
  // Each retry started no sooner than its delay after the attempt before
  // began (the failure came later still); 5 ms for the clocks' rounding.
  assert.ok(starts[1] - starts[0] >= RETRY_BASE - 5, `second attempt ${starts[1] - starts[0]} ms after the first`);
  assert.ok(starts[2] - starts[1] >= 2 * RETRY_BASE - 5, `third attempt ${starts[2] - starts[1]} ms after the second`);
});

test("a Retry-After is obeyed over the policy's delay", async (t) => {
  const RETRY_AFTER = 1500;
  const starts = [];
  const second = deferred();
  startWorker(t, "ts-429", [
    ["crm.sync", async (job) => {
      starts.push(performance.now());
      if (job.attempt === 1) throw new RateLimitedError("429 from CRM", RETRY_AFTER, { reason: "http_429" });
      second.resolve();
    }, { dependency: "crm" }],
  ]);
  const enq = await client.enqueue({ kind: "crm.sync", queue: "ts-429" });
  await within("the second attempt", second.promise, 20_000);
  const job = await settled(enq.id);
  assert.equal(job.state, "completed");
  const [retry] = job.history.filter((e) => e.kind === "retry");
  assert.equal(retry.class, "rate_limited");
  assert.equal(retry.reason, "http_429");
  assert.ok(retry.delay >= RETRY_AFTER, `delay ${retry.delay} ms`);
  assert.ok(starts[1] - starts[0] >= RETRY_AFTER - 5, `second attempt ${starts[1] - starts[0]} ms after the first`);
});

test("a permanent failure is dead at once", async (t) => {
  let calls = 0;
  startWorker(t, "ts-dead", [
    ["bad.pdf", async () => {
      calls++;
      throw new PermanentError("not a PDF", { cause: new Error("magic bytes") });
    }],
  ]);
  const enq = await client.enqueue({ kind: "bad.pdf", queue: "ts-dead" });
  const job = await settled(enq.id);
  assert.equal(job.state, "dead");
  assert.equal(job.attempt, 1);
  assert.equal(job.last_error_class, "permanent");
  assert.match(job.last_error, /not a PDF/);
  assert.equal(calls, 1);
});

test("a snoozed job runs again without using a retry", async (t) => {
  const runs = [];
  startWorker(t, "ts-snooze", [
    ["poll", async (job) => {
      runs.push(job.attempt);
      if (runs.length === 1) throw new SnoozeError(200);
    }],
  ]);
  const enq = await client.enqueue({ kind: "poll", queue: "ts-snooze", maxRetries: 0 });
  const job = await settled(enq.id);
  assert.equal(job.state, "completed");
  assert.equal(runs.length, 2);
  assert.ok(job.history.some((e) => e.kind === "snoozed"), JSON.stringify(job.history));
});

test("an outcome the server refuses is sent again as a failure saying why", async (t) => {
  const refusals = [];
  startWorker(t, "ts-refused", [
    ["odd", async (job) => {
      if (job.attempt === 1) throw new PermanentError("bad", { dependency: "no/slashes" });
      return "second time";
    }],
  ], { onError: (err, where) => refusals.push({ err, where }) });
  const enq = await client.enqueue({ kind: "odd", queue: "ts-refused" });
  const job = await settled(enq.id);
  assert.equal(job.state, "completed");
  assert.equal(job.attempt, 2);
  const [retry] = job.history.filter((e) => e.kind === "retry");
  assert.equal(retry.class, "transient");
  assert.match(retry.error, /refused the worker's fail outcome: 400 .*outcomes\[0\]\.dependency/);
  assert.equal(refusals.length, 1);
  assert.ok(refusals[0].err instanceof RedriveError);
  assert.equal(refusals[0].err.field, "outcomes[0].dependency");
});

test("a cancellation reaches the running handler within 1 s", async (t) => {
  const started = deferred();
  const aborted = deferred();
  startWorker(t, "ts-cancel", [
    ["long", async (job, { signal }) => {
      started.resolve(job);
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      aborted.resolve(signal.reason);
      throw signal.reason;
    }],
  ]);
  const enq = await client.enqueue({ kind: "long", queue: "ts-cancel" });
  await within("the handler starts", started.promise, 20_000);
  const canceled = await client.cancel(enq.id);
  assert.equal(canceled.cancel_requested, true);
  const reason = await within("the handler's signal aborts", aborted.promise, 1000);
  assert.ok(reason instanceof CanceledError, String(reason));
  const job = await settled(enq.id);
  assert.equal(job.state, "canceled");
});

test("a kind's timeout aborts the handler at the job's deadline", async (t) => {
  const started = deferred();
  const aborted = deferred();
  startWorker(t, "ts-deadline", [
    ["slow", async (job, { signal }) => {
      started.resolve(job);
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      aborted.resolve(signal.reason);
      throw signal.reason;
    }, { timeout: 500 }],
  ]);
  const enq = await client.enqueue({ kind: "slow", queue: "ts-deadline" });
  const job = await within("the handler starts", started.promise, 20_000);
  assert.ok(job.deadline instanceof Date, `deadline ${job.deadline}`);
  const reason = await within("the handler's signal aborts at the deadline", aborted.promise, 20_000);
  assert.ok(reason instanceof DeadlineError, String(reason));
  await until(`job ${enq.id} failed its first attempt`, async () => {
    const got = await client.get(enq.id);
    return got.attempt >= 1 && got.state !== "running" ? got : undefined;
  });
});

test("progress is shown by the API", async (t) => {
  const started = deferred();
  const finish = deferred();
  startWorker(t, "ts-progress", [
    ["count", async (job) => {
      job.progress(40, 100);
      started.resolve();
      await finish.promise;
      job.progress(100, 100);
    }],
  ]);
  const enq = await client.enqueue({ kind: "count", queue: "ts-progress" });
  await within("the handler starts", started.promise, 20_000);
  const running = await until("progress 40/100", async () => {
    const job = await client.get(enq.id);
    return job.progress?.done === 40 ? job : undefined;
  });
  assert.equal(running.state, "running");
  assert.equal(running.progress.total, 100);
  finish.resolve();
  const job = await settled(enq.id);
  assert.equal(job.state, "completed");
  assert.deepEqual([job.progress?.done, job.progress?.total], [100, 100]);
});

test("heartbeats keep a job longer than its lease", async (t) => {
  const { worker } = startWorker(t, "ts-long", [
    ["long", async (job, { signal }) => {
      // Real time passing is what is tested: two lease lengths (2 s each)
      // and more, which only heartbeats can bridge.
      await sleep(5000, undefined, { signal });
      return { attempt: job.attempt };
    }],
  ]);
  const enq = await client.enqueue({ kind: "long", queue: "ts-long" });
  const job = await settled(enq.id);
  assert.equal(job.state, "completed");
  assert.equal(job.attempt, 1);
  assert.deepEqual(job.history.filter((e) => e.kind !== "completed"), []);
  assert.equal(worker.running, 0);
});

/** Spawns tests/child-worker.mjs; answers the child and an iterator of its events. */
function spawnWorker(env) {
  const child = spawn(process.execPath, [fileURLToPath(new URL("./child-worker.mjs", import.meta.url))], {
    env: { ...process.env, REDRIVE_URL: serve.url, REDRIVE_TOKEN: serve.token, ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout });
  const events = lines[Symbol.asyncIterator]();
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  return {
    child,
    exited,
    async next(event) {
      for (;;) {
        const { value, done } = await events.next();
        if (done) throw new Error(`the worker process ended before ${event}`);
        const e = JSON.parse(value);
        if (e.event === event) return e;
      }
    },
  };
}

test("a worker SIGKILLed mid-job: the job is rescued and completed by another", async (t) => {
  const proc = spawnWorker({ QUEUE: "ts-kill", KIND: "fragile", MODE: "hang" });
  t.after(() => proc.child.kill("SIGKILL"));
  const enq = await client.enqueue({ kind: "fragile", queue: "ts-kill" });
  const first = await within("the child starts the job", proc.next("started"), 20_000);
  assert.equal(first.id, enq.id);
  proc.child.kill("SIGKILL");
  await proc.exited;

  const rescued = deferred();
  const { worker } = startWorker(t, "ts-kill", [
    ["fragile", async (job) => {
      rescued.resolve(job);
      return { rescued: true };
    }],
  ]);
  const second = await within("another worker runs the rescued job", rescued.promise, 20_000);
  assert.equal(second.id, enq.id);
  assert.ok(second.lease > first.lease, `lease ${second.lease} after ${first.lease}`);
  const job = await settled(enq.id);
  assert.equal(job.state, "completed");
  assert.notEqual(first.worker, worker.name);
  // The killed attempt is in the history: a transient failure, found at
  // lease expiry or when serve saw the process gone.
  const rescue = job.history.find((e) => e.attempt === first.attempt);
  assert.ok(rescue, JSON.stringify(job.history));
  assert.equal(rescue.kind, "retry");
  assert.match(rescue.reason, /^(lease_expired|worker_gone)$/);
});

test("SIGTERM: the worker stops leasing, lets the handler finish, exits", async (t) => {
  const proc = spawnWorker({ QUEUE: "ts-term", KIND: "graceful", MODE: "graceful" });
  t.after(() => proc.child.kill("SIGKILL"));
  const enq = await client.enqueue({ kind: "graceful", queue: "ts-term" });
  await within("the child starts the job", proc.next("started"), 20_000);
  proc.child.kill("SIGTERM");
  await within("the worker process stops", proc.next("stopped"), 20_000);
  assert.deepEqual(await proc.exited, { code: 0, signal: null });
  const job = await client.get(enq.id);
  assert.equal(job.state, "completed");
});

test("stop: a handler past the grace period is aborted and its job released", async (t) => {
  const started = deferred();
  const aborted = deferred();
  const { worker, running } = startWorker(t, "ts-release", [
    ["stubborn", async (job, { signal }) => {
      started.resolve(job);
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      aborted.resolve(signal.reason);
      return "too late";
    }],
  ], { gracePeriodMs: 100 });
  const enq = await client.enqueue({ kind: "stubborn", queue: "ts-release" });
  await within("the handler starts", started.promise, 20_000);
  await worker.stop();
  await running;
  assert.ok((await aborted.promise) instanceof ShutdownError);
  const job = await client.get(enq.id);
  assert.equal(job.state, "pending", JSON.stringify(job));
  assert.ok(job.history.some((e) => e.kind === "released"), JSON.stringify(job.history));
  const res = await fetch(`${serve.url}/v1/workers`, { headers: { authorization: `Bearer ${serve.token}` } });
  const me = (await res.json()).workers.find((w) => w.id === worker.name);
  assert.ok(me?.stopped_at, JSON.stringify(me));
  await client.cancel(enq.id);
});

test("a late outcome is refused with 409 and changes nothing; bad outcomes are 400", async (t) => {
  const api = async (path, body) => {
    const res = await fetch(serve.url + path, {
      method: "POST",
      headers: { authorization: `Bearer ${serve.token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: await res.json() };
  };
  const enq = await client.enqueue({ kind: "late", queue: "ts-late" });
  // A worker that leases the job and then falls silent.
  const leased = await api("/v1/worker/lease", { worker: "ts-silent", queues: ["ts-late"], kinds: ["late"], max: 1, wait: "10s" });
  assert.equal(leased.status, 200);
  const [stale] = leased.body.jobs;
  assert.equal(stale.id, enq.id);

  // Malformed: 400 naming the item, nothing applied.
  const bad = await api("/v1/worker/outcomes", {
    worker: "ts-silent",
    outcomes: [{ id: stale.id, lease: stale.lease, outcome: "fail", class: "mostly_fine", error: "x" }],
  });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.field, "outcomes[0].class");
  assert.equal((await client.get(enq.id)).state, "running");

  // Its lease runs out; another worker gets the job and completes it.
  const done = deferred();
  startWorker(t, "ts-late", [["late", async (job) => done.resolve(job)]]);
  const second = await within("the rescued job runs again", done.promise, 20_000);
  assert.ok(second.lease > stale.lease);
  const completed = await settled(enq.id);
  assert.equal(completed.state, "completed");

  const one = await api(`/v1/worker/jobs/${stale.id}/outcome`, { worker: "ts-silent", lease: stale.lease, outcome: "fail", class: "permanent", error: "late" });
  assert.equal(one.status, 409);
  assert.equal(one.body.error.code, "lease_lost");
  const batch = await api("/v1/worker/outcomes", { worker: "ts-silent", outcomes: [{ id: stale.id, lease: stale.lease, outcome: "complete" }] });
  assert.equal(batch.status, 200);
  assert.equal(batch.body.outcomes[0].status, 409);
  assert.equal(batch.body.outcomes[0].error.code, "lease_lost");
  const after = await client.get(enq.id);
  assert.equal(after.state, "completed");
  assert.deepEqual(after.history, completed.history);
});

test("a token without the worker role stops run() with the server's 403", async () => {
  const reader = new Worker({ url: serve.url, token: readToken, queues: ["ts-auth"], handleSignals: false, onError: () => {} });
  reader.handle("x", async () => {});
  await assert.rejects(reader.run(), (err) => err instanceof RedriveError && err.status === 403 && /needs the worker/.test(err.message));
  const stranger = new Worker({ url: serve.url, token: "y".repeat(40), queues: ["ts-auth"], handleSignals: false, onError: () => {} });
  stranger.handle("x", async () => {});
  await assert.rejects(stranger.run(), (err) => err instanceof RedriveError && err.status === 401);
});

test("no background error went unnoticed", () => {
  const unexpected = errors.filter(({ err }) => !(err?.name === "LeaseLostError"));
  assert.deepEqual(unexpected.map(({ where, err }) => `${where}: ${err}`), []);
});

test("workflows enqueued together run, each job after the ones it waits for", async (t) => {
  const ran = [];
  const done = new Map();
  startWorker(t, "ts-wf-run", [
    ["step", async (job) => {
      ran.push(`${job.payload.i}:${job.payload.step}`);
    }],
    ["done", async (job) => {
      done.set(job.payload.i, true);
    }],
  ]);
  const flows = [0, 1, 2].map((i) => ({
    jobs: [
      { name: "a", kind: "step", queue: "ts-wf-run", payload: { i, step: "a" } },
      { name: "b", kind: "step", queue: "ts-wf-run", payload: { i, step: "b" }, after: ["a"] },
    ],
    onSuccess: { kind: "done", queue: "ts-wf-run", payload: { i } },
  }));
  const got = await client.enqueueWorkflows(flows);
  for (const w of got) await settled(w.on_success);
  for (const i of [0, 1, 2]) {
    assert.ok(done.get(i), `workflow ${i}'s success callback ran`);
    assert.ok(ran.indexOf(`${i}:a`) >= 0 && ran.indexOf(`${i}:a`) < ran.indexOf(`${i}:b`), ran.join(" "));
  }
});
