// A lease answer lost after serve leased its jobs (issue 33): sent again
// with its request id, it answers the same jobs; answers beyond the
// client's bound are not read.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { AnswerTooLargeError, Client, Worker } from "../dist/index.js";
import { startServe, deferred, within } from "./serve.mjs";

let serve;
let client;

before(async () => {
  serve = await startServe({ args: ["--lease", "2s"] });
  client = new Client({ url: serve.url, token: serve.token });
});
after(async () => {
  await serve?.stop();
});

/**
 * A proxy in front of serve that forwards each request and, for the first
 * `cuts` lease answers holding jobs, destroys the connection instead of
 * passing the answer on: serve leased the jobs, the worker never learns
 * their tokens. Answers its URL, the jobs of the answers cut and the lease
 * bodies forwarded.
 */
async function leaseCutProxy(t, cuts) {
  const seen = { cut: [], leases: [] };
  const srv = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.connection;
    delete headers["content-length"];
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const up = await fetch(serve.url + req.url, { method: req.method, headers, body });
    const answer = Buffer.from(await up.arrayBuffer());
    if (req.url === "/v1/worker/lease") {
      seen.leases.push(JSON.parse(body.toString()));
      const jobs = up.status === 200 ? JSON.parse(answer.toString()).jobs ?? [] : [];
      if (jobs.length > 0 && seen.cut.length < cuts) {
        seen.cut.push(jobs);
        req.socket.destroy();
        return;
      }
    }
    res.writeHead(up.status, { "content-type": "application/json" }).end(answer);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  return { url: `http://127.0.0.1:${srv.address().port}`, seen };
}

// FINDING: a lease answer cut after serve leased its jobs stranded them
// until their leases expired (then rescued: another attempt), the worker
// sending a new lease call instead.
test("a lease answer cut is sent again and answers the same jobs", async (t) => {
  const proxy = await leaseCutProxy(t, 2);
  const ids = [];
  for (let n = 0; n < 3; n++) ids.push((await client.enqueue({ kind: "k", payload: { n }, queue: "ts-resend" })).id);
  const ran = [];
  const all = deferred();
  const w = new Worker({ url: proxy.url, token: serve.token, queues: ["ts-resend"], concurrency: 4, pollWaitMs: 1000,
    handleSignals: false, onError: () => {} });
  w.handle("k", async (job) => {
    ran.push([job.id, job.lease]);
    if (ran.length === ids.length) all.resolve();
  });
  const running = w.run();
  try {
    await within("every job ran", all.promise, 30_000);
  } finally {
    await w.stop();
    await running;
  }
  for (const id of ids) {
    const job = await client.get(id);
    assert.equal(job.state, "completed");
    assert.equal(job.attempt, 1, `job ${id} was rescued: ${JSON.stringify(job.history)}`);
  }
  const cut = proxy.seen.cut.flat().map((j) => `${j.id}:${j.lease}`);
  assert.ok(cut.length > 0);
  const got = new Set(ran.map(([id, lease]) => `${id}:${lease}`));
  for (const k of cut) assert.ok(got.has(k), `the lease ${k} cut was not answered again: ${[...got]}`);
  assert.deepEqual(ran.map(([id]) => id).sort(), [...ids].sort());
  const resent = proxy.seen.leases.filter((b) => b.resend);
  assert.ok(resent.length >= proxy.seen.cut.length);
  for (const b of resent) {
    assert.ok(Array.isArray(b.held));
    assert.ok(proxy.seen.leases.some((a) => a.request === b.request && !a.resend));
  }
  const fresh = proxy.seen.leases.filter((b) => !b.resend).map((b) => b.request);
  assert.equal(new Set(fresh).size, fresh.length, "a new call reused a request id");
});

test("a lease answer beyond the bound is sent again for fewer jobs", async () => {
  const big = "x".repeat(1500);
  const ids = [];
  for (let n = 0; n < 4; n++) ids.push((await client.enqueue({ kind: "k", payload: { pad: big }, queue: "ts-big" })).id);
  const ran = [];
  const all = deferred();
  const w = new Worker({ url: serve.url, token: serve.token, queues: ["ts-big"], concurrency: 4, pollWaitMs: 1000,
    handleSignals: false, maxAnswerBytes: 4500, onError: () => {} });
  w.handle("k", async (job) => {
    ran.push(job.id);
    if (ran.length === ids.length) all.resolve();
  });
  const running = w.run();
  try {
    await within("every job ran", all.promise, 30_000);
  } finally {
    await w.stop();
    await running;
  }
  for (const id of ids) assert.equal((await client.get(id)).attempt, 1);
  assert.deepEqual([...ran].sort(), [...ids].sort());
});

/** A server answering every request 200 with a JSON body of size bytes. */
async function bigServer(t, size, chunked) {
  const body = Buffer.from('{"pad":"' + "x".repeat(size - 10) + '"}');
  const srv = createServer((req, res) => {
    const headers = { "content-type": "application/json" };
    if (!chunked) headers["content-length"] = body.length;
    res.writeHead(200, headers);
    res.on("error", () => {});
    if (chunked) {
      for (let i = 0; i < body.length; i += 4096) res.write(body.subarray(i, i + 4096));
      res.end();
    } else {
      res.end(body);
    }
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  return `http://127.0.0.1:${srv.address().port}`;
}

for (const chunked of [false, true]) {
  test(`an answer beyond the bound is refused (${chunked ? "chunked" : "content-length"})`, async (t) => {
    const url = await bigServer(t, 100_000, chunked);
    for (const viaFetch of [false, true]) {
      const opts = viaFetch ? { fetch } : {};
      const small = new Client({ url, maxAnswerBytes: 50_000, ...opts });
      await assert.rejects(small.get(1), (err) => {
        assert.ok(err instanceof AnswerTooLargeError, String(err));
        assert.equal(err.code, "answer_too_large");
        assert.equal(err.limit, 50_000);
        return true;
      });
      const exact = new Client({ url, maxAnswerBytes: 100_000, ...opts });
      assert.equal((await exact.get(1)).pad.length, 100_000 - 10);
    }
  });
}

test("maxAnswerBytes must be a positive whole number", () => {
  for (const bad of [0, -1, 1.5, NaN, "1"]) {
    assert.throws(() => new Client({ url: "http://127.0.0.1:1", maxAnswerBytes: bad }), TypeError);
  }
});

// A serve older than lease request ids refuses the field (400
// unknown_field): the worker leases without them rather than stop.
test("an older serve without lease request ids", async (t) => {
  let refused = 0;
  const srv = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    if (req.url === "/v1/worker/lease") {
      const unknown = Object.keys(JSON.parse(body.toString())).filter((k) => ["request", "resend", "held"].includes(k));
      if (unknown.length > 0) {
        refused++;
        res.writeHead(400, { "content-type": "application/json" })
          .end(JSON.stringify({ error: { code: "unknown_field", field: unknown[0], message: `unknown field "${unknown[0]}"` } }));
        return;
      }
    }
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.connection;
    delete headers["content-length"];
    const up = await fetch(serve.url + req.url, { method: req.method, headers, body });
    res.writeHead(up.status, { "content-type": "application/json" }).end(Buffer.from(await up.arrayBuffer()));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  const { id } = await client.enqueue({ kind: "k", queue: "ts-old" });
  const ran = deferred();
  const w = new Worker({ url: `http://127.0.0.1:${srv.address().port}`, token: serve.token, queues: ["ts-old"], concurrency: 2,
    pollWaitMs: 1000, handleSignals: false, onError: () => {} });
  w.handle("k", async (job) => ran.resolve(job.id));
  const running = w.run();
  try {
    assert.equal(await within("the job ran", ran.promise, 30_000), id);
  } finally {
    await w.stop();
    await running;
  }
  assert.equal(refused, 1);
});
