// Starts a real `redrive serve` for the tests: the binary of $REDRIVE_BIN,
// or one built from this repository; a fresh SQLite folder, a free port and
// a random token. Not a test file itself.

import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../..");

let built;

/** The redrive binary: $REDRIVE_BIN, or built once from the repository. */
export function redriveBin() {
  if (process.env.REDRIVE_BIN) return process.env.REDRIVE_BIN;
  if (built) return built;
  const dir = mkdtempSync(join(tmpdir(), "redrive-ts-bin-"));
  built = join(dir, "redrive");
  execFileSync("go", ["build", "-o", built, "./cmd/redrive"], { cwd: repo, stdio: "inherit" });
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  return built;
}

function freePort() {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolvePort(port));
    });
  });
}

/**
 * Starts serve with args (beside --db, --addr and the token) and config (a
 * serve --config object, written to a file when given). Answers {url,
 * token, dir, stop()} once /readyz says it is ready.
 */
export async function startServe({ args = [], config, again } = {}) {
  const bin = redriveBin();
  // again: the answer of an earlier startServe, stopped with keep: the same
  // folder (database), port and token.
  const dir = again?.dir ?? mkdtempSync(join(tmpdir(), "redrive-ts-"));
  const port = again?.port ?? (await freePort());
  const token = again?.token ?? randomBytes(24).toString("hex");
  const url = `http://127.0.0.1:${port}`;
  const all = ["serve", "--db", join(dir, "redrive.db"), "--addr", `127.0.0.1:${port}`, "--log-format", "text", ...args];
  if (config) {
    const file = join(dir, "serve.json");
    writeFileSync(file, JSON.stringify(config));
    all.push("--config", file);
  }
  const child = spawn(bin, all, {
    cwd: dir,
    env: { ...process.env, REDRIVE_TOKEN: token },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  child.stderr.on("data", (b) => {
    log += b.toString();
    if (log.length > 200_000) log = log.slice(-100_000);
  });
  const exited = new Promise((r) => child.once("exit", (code, signal) => r({ code, signal })));
  let ready = false;
  const deadline = Date.now() + 60_000;
  while (!ready) {
    const state = await Promise.race([exited.then((e) => e), new Promise((r) => setTimeout(() => r(undefined), 50))]);
    if (state) throw new Error(`serve exited (${state.code ?? state.signal}) before it was ready:\n${log}`);
    try {
      const res = await fetch(url + "/readyz");
      ready = res.ok;
      await res.arrayBuffer();
    } catch {
      // not listening yet
    }
    if (!ready && Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`serve not ready after 60 s:\n${log}`);
    }
  }
  return {
    url,
    token,
    dir,
    port,
    log: () => log,
    /** Stops serve (SIGTERM, or signal); removes its folder unless keep. */
    async stop({ keep = false, signal = "SIGTERM" } = {}) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal);
        await exited;
      }
      if (!keep && existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Waits until check() answers a truthy value (polled every 20 ms), within a
 * generous liveness bound; answers that value. For what the API shows and
 * nothing notifies.
 */
export async function until(what, check, boundMs = 20_000) {
  const deadline = Date.now() + boundMs;
  let last;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`not within ${boundMs} ms: ${what}${last ? ` (last error: ${last.message})` : ""}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A promise with its resolve, for events of handlers. */
export function deferred() {
  let resolve, reject;
  const promise = new Promise((a, b) => ((resolve = a), (reject = b)));
  return { promise, resolve, reject };
}

/** Resolves with p's value, or rejects naming what when it takes more than ms. */
export function within(what, p, ms) {
  let timer;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`not within ${ms} ms: ${what}`)), ms);
    }),
  ]);
}
