// Findings of the adversarial review of the worker protocol (issue 33),
// against a real serve.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, Worker } from "../dist/index.js";
import { startServe, until, deferred, within } from "./serve.mjs";

let serve;
let client;

before(async () => {
  serve = await startServe({ args: ["--lease", "2s"] });
  client = new Client({ url: serve.url, token: serve.token });
});
after(async () => {
  await serve?.stop();
});

// FINDING: outcomes whose batch is larger than serve's body bound (1 MiB
// by default: 17 results of 64 KiB) were answered 413 and sent again,
// whole, forever; the worker kept heartbeating their jobs, which stayed
// running.
test("a batch of outcomes larger than serve's body bound is delivered", async (t) => {
  const n = 24;
  const errors = [];
  const all = deferred();
  let started = 0;
  const w = new Worker({
    url: serve.url,
    token: serve.token,
    queues: ["ts-big"],
    concurrency: n,
    handleSignals: false,
    onError: (err, where) => errors.push({ where, err }),
  });
  // A result just under the server's 64 KiB bound: each outcome is good,
  // the batch of them is not.
  const big = "é".repeat(30_000);
  w.handle("big", async () => {
    if (++started === n) all.resolve();
    await all.promise; // every handler ends at once: their outcomes travel together
    return { text: big };
  });
  const ids = [];
  for (let i = 0; i < n; i++) ids.push((await client.enqueue({ kind: "big", queue: "ts-big" })).id);
  const running = w.run();
  try {
    for (const id of ids) {
      await until(`job ${id} completed`, async () => (await client.get(id)).state === "completed", 30_000);
    }
  } finally {
    // Before the fix, stop waited forever on the outcomes it kept sending.
    await within("the worker's stop", w.stop(), 20_000);
  }
  await running;
  const other = errors.filter((e) => e.err?.status !== 413);
  assert.deepEqual(other, []);
});

/** A proxy in front of serve answering the first request to each path of spoil with its body (status 200), forwarding the rest. */
async function proxy(t, spoil) {
  const { createServer } = await import("node:http");
  const left = new Map(Object.entries(spoil));
  const srv = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = left.get(req.url);
    if (body !== undefined) {
      left.delete(req.url);
      res.writeHead(200, { "content-type": "application/json" }).end(body);
      return;
    }
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.connection;
    delete headers["content-length"];
    const up = await fetch(serve.url + req.url, {
      method: req.method,
      headers,
      body: chunks.length ? Buffer.concat(chunks) : undefined,
    });
    res.writeHead(up.status, { "content-type": up.headers.get("content-type") ?? "application/json" }).end(Buffer.from(await up.arrayBuffer()));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  return `http://127.0.0.1:${srv.address().port}`;
}

// FINDING: a 200 answer that is JSON but not the server's (a proxy's
// "null" or "{}") stopped the worker (a lease answered null: TypeError
// out of run()) or was taken as delivering the outcomes (answered {}):
// the job, left running, ran again after its lease expired.
test("answers that are not the server's are retried", async (t) => {
  const url = await proxy(t, { "/v1/worker/lease": "null", "/v1/worker/outcomes": "{}" });
  const errors = [];
  const runs = [];
  const w = new Worker({ url, token: serve.token, queues: ["ts-proxy"], concurrency: 1, handleSignals: false, pollWaitMs: 2000,
    onError: (err, where) => errors.push({ where, err }) });
  w.handle("k", async (job) => {
    runs.push(job.attempt);
    return "ok";
  });
  const enq = await client.enqueue({ kind: "k", queue: "ts-proxy" });
  const running = w.run();
  let stopped;
  running.then(() => (stopped = "resolved"), (err) => (stopped = err));
  try {
    await until(`job ${enq.id} completed`, async () => {
      if (stopped !== undefined) throw new Error(`the worker stopped: ${stopped}`);
      return (await client.get(enq.id)).state === "completed";
    }, 30_000);
  } finally {
    await within("the worker's stop", w.stop(), 20_000);
  }
  await running;
  const job = await client.get(enq.id);
  assert.equal(job.attempt, 1);
  assert.deepEqual(runs, [1]);
});

// FINDING: the worker kept its jobs by id only. A job whose lease it lost
// without noticing (no heartbeat between the lease's end and the job's
// rescue), then leased again, replaced the first lease's entry: the first
// handler was never told, and ran on beside the second.
test("a job leased again aborts the handler of its lost lease", async () => {
  // Lease answers whose heartbeat interval is an hour: the worker never
  // heartbeats, so serve rescues the job at its lease's end (2 s) and the
  // worker learns of the loss only by leasing the job again.
  const lazy = async (input, init) => {
    const res = await fetch(input, init);
    if (!String(input).endsWith("/v1/worker/lease")) return res;
    const body = await res.json();
    if (body && typeof body === "object") body.heartbeat_every = "1h";
    return new Response(JSON.stringify(body), { status: res.status, headers: { "content-type": "application/json" } });
  };
  const first = deferred();
  const second = deferred();
  const w = new Worker({ url: serve.url, token: serve.token, queues: ["ts-relase"], concurrency: 2, handleSignals: false, pollWaitMs: 1000, fetch: lazy });
  w.handle("k", async (job, { signal }) => {
    if (job.attempt === 1) {
      first.resolve(signal);
      // Waits for its signal; before the fix it never came.
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      throw signal.reason;
    }
    second.resolve({ firstAborted: (await first.promise).aborted, reason: (await first.promise).reason });
    return "ok";
  });
  const enq = await client.enqueue({ kind: "k", queue: "ts-relase" });
  const running = w.run();
  try {
    const seen = await within("the job leased again", second.promise, 30_000);
    assert.equal(seen.firstAborted, true, "the first lease's handler still ran when the job was leased again");
    assert.equal(seen.reason?.name, "LeaseLostError");
    await until(`job ${enq.id} completed`, async () => (await client.get(enq.id)).state === "completed", 30_000);
  } finally {
    await within("the worker's stop", w.stop(), 20_000);
  }
  await running;
  assert.equal((await client.get(enq.id)).attempt, 2);
});
