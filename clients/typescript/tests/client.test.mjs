// The enqueue client against a real serve.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, RedriveError } from "../dist/index.js";
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

test("enqueue, get and cancel a job", async () => {
  const runAt = new Date(Date.now() + 3_600_000);
  const job = await client.enqueue({
    kind: "scan.pdf", queue: "ts-client", payload: { doc: "a.pdf" }, priority: 7, maxRetries: 2, runAt, idempotencyKey: "scan-a",
  });
  assert.equal(job.kind, "scan.pdf");
  assert.equal(job.queue, "ts-client");
  assert.equal(job.state, "scheduled");
  assert.equal(job.priority, 7);
  assert.equal(job.max_retries, 2);
  assert.equal(Date.parse(job.run_at), runAt.getTime());
  assert.match(job.warning ?? "", /worker/); // no live worker serves ts-client yet

  const again = await client.enqueue({ kind: "scan.pdf", queue: "ts-client", payload: { doc: "a.pdf" }, idempotencyKey: "scan-a" });
  assert.equal(again.id, job.id);
  assert.equal(again.existing, true);

  const got = await client.get(job.id);
  assert.deepEqual(got.payload, { doc: "a.pdf" });
  assert.ok(Array.isArray(got.history));

  const canceled = await client.cancel(job.id);
  assert.equal(canceled.state, "canceled");
  await assert.rejects(client.cancel(job.id), (err) => err instanceof RedriveError && err.status === 409);
});

test("a delay, and the default queue", async () => {
  const job = await client.enqueue({ kind: "http", payload: { url: "http://127.0.0.1:9/x" }, delayMs: 3_600_000 });
  assert.equal(job.queue, "default");
  assert.equal(job.state, "scheduled");
  await client.cancel(job.id);
});

test("bad input is a RedriveError naming the field, and stores nothing", async () => {
  await assert.rejects(client.enqueue({ kind: "scan.pdf", queue: "ts-bad", priority: 500 }), (err) => {
    assert.ok(err instanceof RedriveError);
    assert.equal(err.status, 400);
    assert.equal(err.field, "priority");
    return true;
  });
  await assert.rejects(client.enqueue({ kind: "scan.pdf", queue: "ts/client" }), (err) => err.status === 400 && err.field === "queue");
  await assert.rejects(client.get(999_999), (err) => err instanceof RedriveError && err.status === 404);
  const res = await fetch(`${serve.url}/v1/jobs/count?queue=ts-bad`, { headers: { authorization: `Bearer ${serve.token}` } });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { count: 0 });
});

test("a wrong token is refused", async () => {
  const bad = new Client({ url: serve.url, token: "x".repeat(32) });
  await assert.rejects(bad.get(1), (err) => err instanceof RedriveError && err.status === 401);
});

test("enqueueMany stores all or none", async () => {
  const jobs = await client.enqueueMany([
    { kind: "a", queue: "ts-many", payload: 1, delayMs: 3_600_000 },
    { kind: "b", queue: "ts-many", payload: 2, delayMs: 3_600_000 },
  ]);
  assert.deepEqual(jobs.map((j) => [j.kind, j.payload]), [["a", 1], ["b", 2]]);
  await assert.rejects(
    client.enqueueMany([{ kind: "c", queue: "ts-many" }, { kind: "d", queue: "ts-many", priority: 1000 }]),
    (err) => err instanceof RedriveError && err.status === 400 && err.field === "jobs[1].priority",
  );
  const res = await fetch(`${serve.url}/v1/jobs/count?queue=ts-many`, { headers: { authorization: `Bearer ${serve.token}` } });
  assert.deepEqual(await res.json(), { count: 2 });
  await assert.rejects(client.enqueueMany([]), /1 to 1000/);
  await assert.rejects(client.enqueueMany([{ kind: "" }]), /jobs\[0\]: kind/);
});
