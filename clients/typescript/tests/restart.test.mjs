// The worker outlives its server: while serve is down its calls fail and
// are retried, reported to onError; once serve is back it goes on.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, Worker } from "../dist/index.js";
import { startServe, deferred, within } from "./serve.mjs";

test("a worker goes on after its serve restarts", async (t) => {
  let serve = await startServe();
  t.after(() => serve.stop());
  const errors = [];
  const failedWhileDown = deferred();
  const ran = [];
  let next = deferred();
  const worker = new Worker({
    url: serve.url,
    token: serve.token,
    queues: ["ts-restart"],
    handleSignals: false,
    pollWaitMs: 5000,
    onError: (err, where) => {
      errors.push(`${where}: ${err?.cause?.code ?? err}`);
      if (where === "lease") failedWhileDown.resolve();
    },
  });
  worker.handle("k", async (job) => {
    ran.push(job.id);
    next.resolve(job.id);
  });
  const running = worker.run();
  t.after(() => worker.stop());

  let client = new Client({ url: serve.url, token: serve.token });
  const first = await client.enqueue({ kind: "k", queue: "ts-restart" });
  assert.equal(await within("the first job runs", next.promise, 20_000), first.id);

  await serve.stop({ keep: true });
  await within("the worker sees serve gone", failedWhileDown.promise, 20_000);
  serve = await startServe({ again: serve });
  client = new Client({ url: serve.url, token: serve.token });
  next = deferred();
  const second = await client.enqueue({ kind: "k", queue: "ts-restart" });
  assert.equal(await within("the second job runs on the restarted serve", next.promise, 30_000), second.id);
  assert.deepEqual(ran, [first.id, second.id]);
  assert.ok(errors.length > 0);
  assert.ok(errors.every((e) => /^(lease|cancels|heartbeat|outcomes): /.test(e)), errors.join("\n"));
  await worker.stop();
  await running;
});
