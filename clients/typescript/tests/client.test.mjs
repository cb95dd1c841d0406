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

test("enqueueWorkflows stores many workflows at once, all or none", async () => {
  const flow = (i, idempotencyKey) => ({
    name: `order-${i}`,
    onDead: "wait",
    idempotencyKey,
    jobs: [
      { name: "reserve", kind: "reserve", queue: "ts-wf", payload: { i } },
      { name: "charge", kind: "charge", queue: "ts-wf", payload: { i }, after: ["reserve"], maxRetries: 2 },
    ],
    onSuccess: { kind: "done", queue: "ts-wf", payload: { i } },
  });
  const got = await client.enqueueWorkflows([flow(0, "ts-wf-0"), flow(1)]);
  assert.deepEqual(got.map((w) => w.name), ["order-0", "order-1"]);
  for (const w of got) {
    assert.equal(w.existing, undefined);
    assert.equal(w.total, 2);
    assert.ok(w.on_success > 0);
    const byName = Object.fromEntries(w.jobs.map((j) => [j.name, j]));
    assert.equal(byName.reserve.state, "pending");
    assert.equal(byName.charge.state, "blocked");
    assert.deepEqual(byName.charge.after, [byName.reserve.job_id]);
  }
  const again = await client.enqueueWorkflows([flow(0, "ts-wf-0"), flow(2, "ts-wf-2")]);
  assert.equal(again[0].id, got[0].id);
  assert.equal(again[0].existing, true);
  assert.equal(again[1].name, "order-2");

  const bad = flow(3);
  bad.jobs[1].after = ["nowhere"];
  await assert.rejects(
    client.enqueueWorkflows([flow(4, "ts-wf-4"), bad]),
    (err) => err instanceof RedriveError && err.status === 400 && err.field.startsWith("workflows[1].jobs"),
  );
  const stored = await client.enqueueWorkflows([flow(4, "ts-wf-4")]);
  assert.equal(stored[0].existing, undefined, "the refused call stored its first workflow");

  await assert.rejects(client.enqueueWorkflows([]), /1 to 1000/);
  await assert.rejects(client.enqueueWorkflows([{ jobs: [] }]), /workflows\[0\]\.jobs: a non-empty array/);
  await assert.rejects(client.enqueueWorkflows([{ jobs: [{ name: "a", kind: "" }] }]), /workflows\[0\]\.jobs\[0\]: kind/);
  await assert.rejects(client.enqueueWorkflows([{ jobs: [{ kind: "k" }] }]), /workflows\[0\]\.jobs\[0\]\.name/);
  await assert.rejects(client.enqueueWorkflows([{ jobs: [{ name: "a", kind: "k", after: "b" }] }]), /workflows\[0\]\.jobs\[0\]\.after/);
  await assert.rejects(client.enqueueWorkflows([{ jobs: [{ name: "a", kind: "k" }], onSuccess: { kind: "" } }]), /workflows\[0\]\.on_success: kind/);
});
