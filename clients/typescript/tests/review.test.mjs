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
