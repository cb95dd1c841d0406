// Findings of the adversarial review of the node:http transport (issue 33,
// after the change from fetch), against a real serve behind proxies that
// misbehave.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { Client } from "../dist/index.js";
import { startServe } from "./serve.mjs";

let serve;
let client;

before(async () => {
  serve = await startServe();
  client = new Client({ url: serve.url, token: serve.token });
});
after(async () => {
  await serve?.stop();
});

/**
 * A proxy in front of serve that forwards each request and, for the first
 * request to cutPath sent on a kept connection (the second request or
 * later of its connection), cuts the connection once serve has answered
 * it: serve applied the request, the client gets no answer. Answers its
 * URL and how many requests to cutPath it forwarded.
 */
async function cutAfterApplying(t, cutPath) {
  const perSocket = new WeakMap();
  const seen = { forwarded: 0, cut: 0 };
  const srv = createServer(async (req, res) => {
    const n = (perSocket.get(req.socket) ?? 0) + 1;
    perSocket.set(req.socket, n);
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.connection;
    delete headers["content-length"];
    const up = await fetch(serve.url + req.url, { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
    const body = Buffer.from(await up.arrayBuffer());
    if (req.url === cutPath) {
      seen.forwarded++;
      if (n >= 2 && seen.cut === 0) {
        seen.cut++;
        req.socket.destroy();
        return;
      }
    }
    res.writeHead(up.status, { "content-type": "application/json" }).end(body);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  return { url: `http://127.0.0.1:${srv.address().port}`, seen };
}

async function jobsOf(queue) {
  const res = await fetch(`${serve.url}/v1/jobs?queue=${queue}&limit=100`, { headers: { authorization: `Bearer ${serve.token}` } });
  assert.equal(res.status, 200);
  return (await res.json()).jobs;
}

// FINDING: a request cut on a kept connection before any answer was sent
// again on a new one, whatever it was: an enqueue without an idempotency
// key that serve had read and stored was stored twice (two jobs for one
// enqueue call, and the caller told of one).
test("an enqueue without a key cut after serve stored it is not sent again", async (t) => {
  const { url, seen } = await cutAfterApplying(t, "/v1/jobs");
  const c = new Client({ url, token: serve.token });
  // The first call opens the connection the enqueue is sent on, kept.
  await c.enqueue({ kind: "k", queue: "ts-cut", idempotencyKey: "warm" });
  await assert.rejects(c.enqueue({ kind: "k", queue: "ts-cut", payload: { once: true } }), (err) => err.code === "ECONNRESET");
  assert.equal(seen.cut, 1);
  const jobs = await jobsOf("ts-cut");
  assert.equal(jobs.filter((j) => j.idempotency_key === undefined).length, 1, `one enqueue stored ${JSON.stringify(jobs)}`);
  assert.equal(seen.forwarded, 2);
});

test("a batch without keys cut after serve stored it is not sent again", async (t) => {
  const { url, seen } = await cutAfterApplying(t, "/v1/jobs/batch");
  const c = new Client({ url, token: serve.token });
  await c.enqueueMany([{ kind: "k", queue: "ts-cut-batch", idempotencyKey: "warm-batch" }]);
  await assert.rejects(c.enqueueMany([{ kind: "k", queue: "ts-cut-batch" }, { kind: "k", queue: "ts-cut-batch" }]), (err) => err.code === "ECONNRESET");
  assert.equal(seen.cut, 1);
  assert.equal((await jobsOf("ts-cut-batch")).length, 3);
});

// What held: an enqueue with a key is still sent again (its second copy
// answers the job the first stored), as is a read.
test("an enqueue with a key cut after serve stored it is sent again and answers the job", async (t) => {
  const { url, seen } = await cutAfterApplying(t, "/v1/jobs");
  const c = new Client({ url, token: serve.token });
  await c.enqueue({ kind: "k", queue: "ts-cut-key", idempotencyKey: "warm-key" });
  const job = await c.enqueue({ kind: "k", queue: "ts-cut-key", idempotencyKey: "once" });
  assert.equal(seen.cut, 1);
  assert.equal(job.existing, true);
  const jobs = await jobsOf("ts-cut-key");
  assert.equal(jobs.length, 2);
  assert.equal(jobs.filter((j) => j.idempotency_key === "once").length, 1);
});

test("a cancel cut after serve applied it is not sent again", async (t) => {
  const enq = await client.enqueue({ kind: "k", queue: "ts-cut-cancel", delayMs: 3_600_000 });
  const { url, seen } = await cutAfterApplying(t, `/v1/jobs/${enq.id}/cancel`);
  const c = new Client({ url, token: serve.token });
  await c.get(enq.id);
  // Before the fix: sent again, the second copy answered 409 (the job is
  // canceled already), thrown as though the cancel had failed.
  await assert.rejects(c.cancel(enq.id), (err) => err.code === "ECONNRESET");
  assert.equal(seen.cut, 1);
  assert.equal((await client.get(enq.id)).state, "canceled");
});
