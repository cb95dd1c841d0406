// A TypeScript program using the package through its published types
// (dist/*.d.ts): `npm test` type-checks it, so that the types stay usable.
import {
  Client,
  Worker,
  PermanentError,
  RateLimitedError,
  SnoozeError,
  RedriveError,
  type Job,
  type LeasedJob,
  type HandlerContext,
} from "../dist/index.js";

interface Scan {
  doc: string;
  pages: number;
}

export async function example(url: string, token: string): Promise<void> {
  const client = new Client({ url, token });
  const job: Job = await client.enqueue({ kind: "scan.pdf", queue: "scan", payload: { doc: "a.pdf", pages: 2 }, runAt: new Date() });
  const state: Job["state"] = job.state;
  void state;

  const worker = new Worker({ url, token, queues: ["scan"], concurrency: 4, gracePeriodMs: 1000 });
  worker.handle<Scan>("scan.pdf", async (j: LeasedJob<Scan>, { signal }: HandlerContext) => {
    const pages: number = j.payload.pages;
    if (signal.aborted) throw signal.reason;
    if (j.payload.doc === "") throw new PermanentError("no document", { reason: "empty" });
    if (pages > 100) throw new RateLimitedError("slow down", 2000);
    if (pages === 0) throw new SnoozeError(500);
    j.progress(1, pages);
    return { pages };
  });
  try {
    await worker.run();
  } catch (err) {
    if (err instanceof RedriveError) console.error(err.status, err.code, err.field);
  }
}
