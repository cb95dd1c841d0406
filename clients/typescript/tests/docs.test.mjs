// The runnable example of docs/typescript.md runs: its first js block,
// importing this package's dist, against a real serve.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "../dist/index.js";
import { startServe, until, within } from "./serve.mjs";

const dir = mkdtempSync(join(tmpdir(), "redrive-ts-doc-"));
after(() => rmSync(dir, { recursive: true, force: true }));

test("the example of docs/typescript.md runs", async (t) => {
  const doc = readFileSync(new URL("../../../docs/typescript.md", import.meta.url), "utf8");
  const block = /```js\n([\s\S]*?)```/.exec(doc);
  assert.ok(block, "a js block in docs/typescript.md");
  const code = block[1].replace('from "@redrive/client"', `from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)}`);
  assert.notEqual(code, block[1], "the example imports @redrive/client");
  const file = join(dir, "scan.mjs");
  writeFileSync(file, code);

  const serve = await startServe();
  t.after(() => serve.stop());
  const child = spawn(process.execPath, [file], {
    env: { ...process.env, REDRIVE_URL: serve.url, REDRIVE_TOKEN: serve.token },
    stdio: ["ignore", "pipe", "inherit"],
  });
  t.after(() => child.kill("SIGKILL"));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const line = async () => (await lines.next()).value;

  const enqueued = await within("the example enqueues", line(), 20_000);
  const [, id] = /^job (\d+): enqueued$/.exec(enqueued) ?? [];
  assert.ok(id, enqueued);
  assert.equal(await within("the example scans", line(), 30_000), `job ${id}: scanned a.pdf, 20 pages`);
  const client = new Client({ url: serve.url, token: serve.token });
  const job = await until("the job completed", async () => {
    const j = await client.get(Number(id));
    return j.state === "completed" ? j : undefined;
  });
  assert.deepEqual([job.progress?.done, job.progress?.total], [20, 20]);
  child.kill("SIGTERM");
  assert.deepEqual(await exited, { code: 0, signal: null });
});
