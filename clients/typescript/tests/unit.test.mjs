// Tests of what the client decides alone: durations, the mapping of a
// handler's errors to outcomes, the options it refuses.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  parseDuration,
  formatDuration,
  Worker,
  Client,
  PermanentError,
  NeedsAuthError,
  TransientError,
  RateLimitedError,
  SnoozeError,
  RedriveError,
} from "../dist/index.js";
import { failOutcome, completeOutcome, defaultName, MAX_RESULT } from "../dist/worker.js";
import { enqueueBody } from "../dist/client.js";
import { errorOf, Transport } from "../dist/http.js";

test("parseDuration reads Go durations", () => {
  const cases = {
    "0": 0,
    "0s": 0,
    "30s": 30_000,
    "250ms": 250,
    "1m30s": 90_000,
    "1.5h": 5_400_000,
    "1h2m3s4ms": 3_723_004,
    "1500us": 1.5,
    "1500µs": 1.5,
    "1500μs": 1.5,
    "2000000ns": 2,
    ".5s": 500,
    "-2s": -2000,
    "+2s": 2000,
  };
  for (const [text, ms] of Object.entries(cases)) assert.equal(parseDuration(text), ms, text);
});

test("parseDuration refuses what is no duration, naming it", () => {
  for (const text of ["", "s", "10", "1d", "1.2.3s", " 1s", "1s ", "1 s", "-", "ms", "1e3s", "NaNs", "99999999999999h"]) {
    assert.throws(() => parseDuration(text), (err) => err instanceof RangeError && err.message.includes(JSON.stringify(text)), text);
  }
});

// A randomized check of the parser: random texts built from its alphabet
// never throw anything but a RangeError, and every duration formatDuration
// writes parses back to the same number.
test("parseDuration on random input; formatDuration round-trips", () => {
  let seed = 42;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const alphabet = "0123456789.+-nsuµmh x";
  for (let i = 0; i < 20_000; i++) {
    let text = "";
    const n = Math.floor(rand() * 10);
    for (let j = 0; j < n; j++) text += alphabet[Math.floor(rand() * alphabet.length)];
    try {
      const v = parseDuration(text);
      assert.ok(Number.isFinite(v), text);
    } catch (err) {
      assert.ok(err instanceof RangeError, `${JSON.stringify(text)}: ${err}`);
    }
    const ms = rand() < 0.5 ? Math.floor(rand() * 1e9) : Math.floor(rand() * 1e6) / 1000;
    assert.equal(parseDuration(formatDuration(ms)), ms, String(ms));
  }
  assert.equal(formatDuration(0), "0s");
  assert.equal(formatDuration(1500), "1500ms");
  assert.equal(formatDuration(0.25), "250us");
  for (const bad of [-1, NaN, Infinity, "1s"]) assert.throws(() => formatDuration(bad), RangeError);
});

const wire = { id: 7, lease: 3 };

test("a handler's errors map to the protocol's outcomes", () => {
  assert.deepEqual(failOutcome(wire, new PermanentError("bad pdf")), { id: 7, lease: 3, outcome: "fail", class: "permanent", error: "bad pdf" });
  assert.deepEqual(failOutcome(wire, new NeedsAuthError("token expired", { reason: "http_401" })), {
    id: 7, lease: 3, outcome: "fail", class: "needs_auth", error: "token expired", reason: "http_401",
  });
  assert.deepEqual(failOutcome(wire, new TransientError("503", { dependency: "ocr" })), {
    id: 7, lease: 3, outcome: "fail", class: "transient", error: "503", dependency: "ocr",
  });
  assert.deepEqual(failOutcome(wire, new RateLimitedError("429 from CRM", 2000, { reason: "http_429" }), "crm"), {
    id: 7, lease: 3, outcome: "fail", class: "rate_limited", error: "429 from CRM", reason: "http_429", retry_after: "2000ms", dependency: "crm",
  });
  assert.deepEqual(failOutcome(wire, new RateLimitedError("429")), { id: 7, lease: 3, outcome: "fail", class: "rate_limited", error: "429" });
  assert.deepEqual(failOutcome(wire, new SnoozeError(30_000)), { id: 7, lease: 3, outcome: "snooze", delay: "30000ms" });
  // Anything else is transient; the cause is kept; the handler's dependency applies.
  assert.deepEqual(failOutcome(wire, new Error("socket hang up", { cause: new Error("ECONNRESET") }), "ocr"), {
    id: 7, lease: 3, outcome: "fail", class: "transient", error: "socket hang up", cause: "ECONNRESET", dependency: "ocr",
  });
  assert.equal(failOutcome(wire, "a string").error, "a string");
  assert.equal(failOutcome(wire, { code: 5 }).error, '{"code":5}');
  assert.equal(failOutcome(wire, new Error("")).error, "Error");
  assert.equal(failOutcome(wire, undefined).class, "transient");
  assert.ok(failOutcome(wire, undefined).error.length > 0);
  // What the server would refuse is cut to what it takes.
  const long = failOutcome(wire, new PermanentError("e".repeat(100_000), { reason: "bad\nreason" + "r".repeat(300), cause: "c".repeat(9000) }));
  assert.equal(long.error.length, 8192);
  assert.equal(long.cause.length, 8192);
  assert.equal(long.reason.length, 200);
  assert.match(long.reason, /^bad reason/);
  assert.equal(failOutcome(wire, new RateLimitedError("x", 1e15)).retry_after, `${10 * 365 * 24 * 3_600_000}ms`);
  assert.equal(failOutcome(wire, new SnoozeError(0.5)).delay, "500us");
  // The error's own dependency wins over the handler's.
  assert.equal(failOutcome(wire, new PermanentError("x", { dependency: "own" }), "kind").dependency, "own");
});

test("a handler's value is the result; what is not JSON fails it permanently", () => {
  assert.deepEqual(completeOutcome(wire, undefined), { id: 7, lease: 3, outcome: "complete" });
  assert.deepEqual(completeOutcome(wire, { pages: 3 }), { id: 7, lease: 3, outcome: "complete", result: { pages: 3 } });
  assert.deepEqual(completeOutcome(wire, null), { id: 7, lease: 3, outcome: "complete", result: null });
  const cyclic = {};
  cyclic.self = cyclic;
  for (const bad of [cyclic, 10n, () => 1, Symbol("s")]) {
    const o = completeOutcome(wire, bad);
    assert.equal(o.outcome, "fail");
    assert.equal(o.class, "permanent");
    assert.match(o.error, /not JSON/);
  }
  const big = completeOutcome(wire, "x".repeat(MAX_RESULT));
  assert.equal(big.outcome, "fail");
  assert.match(big.error, /more than 65536/);
  assert.equal(completeOutcome(wire, "x".repeat(MAX_RESULT - 2)).outcome, "complete");
});

test("error constructors refuse bad delays", () => {
  assert.throws(() => new RateLimitedError("x", -1), RangeError);
  assert.throws(() => new RateLimitedError("x", NaN), RangeError);
  assert.throws(() => new SnoozeError(-5), RangeError);
  assert.throws(() => new SnoozeError(0), RangeError);
  const e = new PermanentError("m", { cause: "c" });
  assert.equal(e.name, "PermanentError");
  assert.equal(e.cause, "c");
  assert.ok(e instanceof Error);
});

test("the default worker name follows the protocol's alphabet", () => {
  assert.equal(defaultName(4121, "box-a"), "node-4121@box-a");
  assert.equal(defaultName(1, "my host/é@x"), "node-1@my-host---x");
  assert.equal(defaultName(1, "h".repeat(200)).length, 100);
  assert.match(new Worker({ url: "http://127.0.0.1:1", queues: ["q"] }).name, /^node-\d+@[A-Za-z0-9._:-]+$/);
});

test("a worker refuses bad options with a clear error", () => {
  const url = "http://127.0.0.1:1";
  assert.throws(() => new Worker({ url, queues: [] }), /queues/);
  assert.throws(() => new Worker({ url, queues: ["q"], concurrency: 0 }), /concurrency/);
  assert.throws(() => new Worker({ url, queues: ["q"], concurrency: 1.5 }), /concurrency/);
  assert.throws(() => new Worker({ url, queues: ["q"], name: "has space" }), /name/);
  assert.throws(() => new Worker({ url, queues: ["q"], name: "x".repeat(101) }), /name/);
  assert.throws(() => new Worker({ url, queues: ["q"], pollWaitMs: 61_000 }), /pollWaitMs/);
  assert.throws(() => new Worker({ url: "ftp://x", queues: ["q"] }), /url/);
  assert.throws(() => new Worker({ url: "not a url", queues: ["q"] }), /url/);
  assert.throws(() => new Worker({ url, queues: ["q"], token: "a\nb" }), /token/);
  const w = new Worker({ url, queues: ["q"] });
  w.handle("k", async () => {});
  assert.throws(() => w.handle("k", async () => {}), /already has a handler/);
  assert.throws(() => w.handle("", async () => {}), /kind/);
  assert.throws(() => w.handle("j", "nope"), /function/);
  assert.throws(() => w.handle("j", async () => {}, { dependency: "" }), /dependency/);
});

test("a worker without handlers does not run", async () => {
  const w = new Worker({ url: "http://127.0.0.1:1", queues: ["q"], handleSignals: false });
  await assert.rejects(w.run(), /no handler registered/);
});

test("enqueue options become the API's body", async () => {
  assert.deepEqual(
    enqueueBody({
      kind: "scan.pdf", payload: { doc: "a.pdf" }, queue: "scan", priority: 5, idempotencyKey: "k1",
      runAt: new Date("2026-11-29T01:00:00.000Z"), maxRetries: 2, dependency: "ocr", notReprocessable: true,
    }),
    {
      kind: "scan.pdf", payload: { doc: "a.pdf" }, queue: "scan", priority: 5, idempotency_key: "k1",
      run_at: "2026-11-29T01:00:00.000Z", max_retries: 2, dependency: "ocr", not_reprocessable: true,
    },
  );
  assert.deepEqual(enqueueBody({ kind: "k", delayMs: 1500 }), { kind: "k", delay: "1500ms" });
  assert.throws(() => enqueueBody({ kind: "k", delayMs: 1, runAt: new Date() }), /one or the other/);
  assert.throws(() => enqueueBody({ kind: "k", runAt: new Date("nope") }), /invalid Date/);
  assert.throws(() => enqueueBody({ kind: "k", delayMs: -1 }), /delayMs/);
  assert.throws(() => enqueueBody({}), /kind/);
  await assert.rejects(new Client({ url: "http://x" }).get(0), /positive integer/);
});

test("the API's error body becomes a RedriveError", () => {
  const e = errorOf(409, { error: { code: "lease_lost", message: "stale", field: "lease" } }, "");
  assert.ok(e instanceof RedriveError);
  assert.equal(e.status, 409);
  assert.equal(e.code, "lease_lost");
  assert.equal(e.field, "lease");
  assert.match(e.message, /409 lease_lost: stale \(field lease\)/);
  const raw = errorOf(502, undefined, "Bad Gateway\n");
  assert.equal(raw.code, "http_502");
  assert.equal(raw.message, "502 http_502: Bad Gateway");
});

/**
 * A raw HTTP/1.1 server for the transport's tests: answers each request
 * with handle(n, socket) — n counts requests over all connections —
 * which writes an answer or destroys the socket. Answers {url, conns(),
 * close()}.
 */
async function rawServer(handle) {
  const { createServer } = await import("node:net");
  let requests = 0;
  let conns = 0;
  const sockets = new Set();
  const srv = createServer((socket) => {
    conns++;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    let buf = "";
    socket.on("data", (d) => {
      buf += d.toString("latin1");
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const len = Number(/content-length: *(\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        buf = buf.slice(end + 4 + len);
        handle(++requests, socket);
      }
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    conns: () => conns,
    requests: () => requests,
    close: () => new Promise((r) => { for (const s of sockets) s.destroy(); srv.close(r); }),
  };
}

function answer(socket, status, body) {
  socket.write(`HTTP/1.1 ${status} X\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
}

test("a request cut on a kept connection is sent again on a new one", async (t) => {
  // The second request arrives on the first one's kept connection, which
  // the server then closes unanswered (as a server closing an idle
  // connection does): the transport sends it again, once, on a new one.
  const srv = await rawServer((n, socket) => (n === 2 ? socket.destroy() : answer(socket, 200, `{"n":${n}}`)));
  t.after(srv.close);
  const calls = [];
  const client = new Client({ url: srv.url, observe: (c) => calls.push(c) });
  assert.deepEqual(await client.get(1).catch((e) => e), { n: 1 });
  assert.deepEqual(await client.get(2).catch((e) => e), { n: 3 });
  assert.equal(srv.conns(), 2);
  assert.deepEqual(calls.map((c) => [c.method, c.path, c.status, c.answer]), [
    ["GET", "/v1/jobs/1", 200, { n: 1 }],
    ["GET", "/v1/jobs/2", 200, { n: 3 }],
  ]);
  assert.ok(calls.every((c) => c.ms >= 0));
});

test("a request cut on a new connection is not sent again", async (t) => {
  const srv = await rawServer((n, socket) => socket.destroy());
  t.after(srv.close);
  const err = await new Client({ url: srv.url }).get(1).then(() => undefined, (e) => e);
  assert.ok(err instanceof Error, "the call succeeded");
  assert.equal(err.code, "ECONNRESET");
  assert.equal(srv.requests(), 1);
});

test("observe sees error answers; a malformed 2xx answer throws", async (t) => {
  const srv = await rawServer((n, socket) =>
    n === 1 ? answer(socket, 404, `{"error":{"code":"not_found","message":"no job 9"}}`) : answer(socket, 200, "not json"),
  );
  t.after(srv.close);
  const calls = [];
  const client = new Client({ url: srv.url, observe: (c) => calls.push(c) });
  const e404 = await client.get(9).then(() => undefined, (e) => e);
  assert.ok(e404 instanceof RedriveError);
  assert.equal(e404.status, 404);
  assert.equal(e404.code, "not_found");
  const bad = await client.get(10).then(() => undefined, (e) => e);
  assert.ok(bad instanceof RedriveError);
  assert.equal(bad.code, "malformed_answer");
  assert.deepEqual(calls.map((c) => [c.status, c.answer]), [[404, { error: { code: "not_found", message: "no job 9" } }], [200, undefined]]);
});

test("an aborted request rejects at once", async (t) => {
  const srv = await rawServer(() => {}); // never answers
  t.after(srv.close);
  const transport = new Transport({ url: srv.url });
  const ac = new AbortController();
  const call = transport.request("POST", "/v1/worker/lease", { wait: "1m" }, ac.signal).then(() => undefined, (e) => e);
  await new Promise((r) => { const check = () => (srv.requests() > 0 ? r() : setTimeout(check, 5)); check(); });
  ac.abort();
  const err = await call;
  assert.ok(err instanceof Error, "the call succeeded");
  assert.equal(err.name, "AbortError");
});

test("the transport's options are checked", () => {
  assert.throws(() => new Client({ url: "http://127.0.0.1:1", fetch: 3 }), /fetch: expected a function/);
  assert.throws(() => new Client({ url: "http://127.0.0.1:1", observe: "x" }), /observe: expected a function/);
  assert.throws(() => new Client({ url: "http://127.0.0.1:1", agent: {} }), /agent: expected an http.Agent/);
  for (const timeoutMs of [0, -1, NaN, Infinity, "5"]) {
    assert.throws(() => new Client({ url: "http://127.0.0.1:1", timeoutMs }), /timeoutMs: expected a positive number/, String(timeoutMs));
  }
});

// FINDING: an observe hook that threw made the call reject with its
// error though serve had answered: a worker's lease answer was lost (its
// jobs leased to nobody until their leases ran out), an outcome sent
// again.
test("an observe hook that throws does not fail the call", async (t) => {
  const srv = await rawServer((n, socket) => answer(socket, 200, `{"n":${n}}`));
  t.after(srv.close);
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on("warning", onWarning);
  t.after(() => process.off("warning", onWarning));
  const client = new Client({ url: srv.url, observe: () => { throw new Error("observer bug"); } });
  assert.deepEqual(await client.get(1), { n: 1 });
  assert.deepEqual(await client.get(2), { n: 2 });
  // Told once, as a process warning.
  await new Promise((r) => setImmediate(r));
  const ours = warnings.filter((w) => /observer bug/.test(w.message));
  assert.equal(ours.length, 1, warnings.map((w) => w.message).join("; "));
});

// FINDING: options the transport cannot honour were taken silently: an
// agent beside a fetch (the agent unused), an agent of the other protocol
// than the URL's (every call failed with ERR_INVALID_PROTOCOL: a worker
// retried forever), a base URL with a query or fragment (the API's paths
// appended after it).
test("options the transport cannot honour are refused", async () => {
  const http = await import("node:http");
  const https = await import("node:https");
  assert.throws(() => new Client({ url: "http://127.0.0.1:1", fetch, agent: new http.Agent() }), /agent: .*fetch/);
  assert.throws(() => new Client({ url: "https://127.0.0.1:1", agent: new http.Agent() }), /agent: .*https:/);
  assert.throws(() => new Client({ url: "http://127.0.0.1:1", agent: new https.Agent() }), /agent: .*http:/);
  assert.throws(() => new Worker({ url: "https://127.0.0.1:1", queues: ["q"], agent: new http.Agent() }), /agent: .*https:/);
  for (const url of ["http://127.0.0.1:1/?x=1", "http://127.0.0.1:1/#top", "http://127.0.0.1:1/api?"]) {
    assert.throws(() => new Client({ url }), /url: .*query or fragment/, url);
  }
  // What holds: an agent of the URL's protocol, a path prefix.
  new Client({ url: "https://127.0.0.1:1/redrive/", agent: new https.Agent({ keepAlive: true }) });
  new Client({ url: "http://127.0.0.1:1/redrive", agent: new http.Agent() });
});

// What held: a chunked answer is read whole; an answer cut mid-body (a
// proxy closing) fails the call, and is not sent again, even on a kept
// connection: the server answered, so it read the request.
test("a chunked answer; an answer cut mid-body", async (t) => {
  const srv = await rawServer((n, socket) => {
    if (n === 1) {
      socket.write("HTTP/1.1 201 X\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n");
      socket.write('5\r\n{"id"\r\n');
      setImmediate(() => socket.write("3\r\n:7}\r\n0\r\n\r\n"));
      return;
    }
    socket.write('HTTP/1.1 201 X\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"id":');
    setImmediate(() => socket.destroy());
  });
  t.after(srv.close);
  const client = new Client({ url: srv.url });
  assert.deepEqual(await client.enqueue({ kind: "k" }), { id: 7 });
  const err = await client.enqueue({ kind: "k" }).then(() => undefined, (e) => e);
  assert.ok(err instanceof Error, "the call succeeded");
  assert.equal(srv.requests(), 2);
  assert.equal(srv.conns(), 1);
});

// What held (the Python client's defect, not the TypeScript one's): a
// kept connection the server closed while idle is dropped from the
// agent's pool, so an enqueue after it, not idempotent, goes on a new one.
test("an enqueue after the server closed the idle connection", async (t) => {
  let closed;
  const srv = await rawServer((n, socket) => {
    answer(socket, 201, `{"n":${n}}`);
    closed = new Promise((r) => socket.once("close", r));
    socket.end();
  });
  t.after(srv.close);
  const client = new Client({ url: srv.url });
  assert.deepEqual(await client.enqueue({ kind: "k" }), { n: 1 });
  await closed;
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(await client.enqueue({ kind: "k" }), { n: 2 });
  assert.equal(srv.conns(), 2);
});
