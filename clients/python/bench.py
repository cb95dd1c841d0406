"""Benchmark of Python workers on `redrive serve` over the worker protocol.

    python bench.py --jobs 100000 --procs 4

Starts `redrive serve` on a fresh SQLite file in a temporary folder (the
binary from --bin or $REDRIVE_BIN, else built from this checkout), or
uses --url. Then:

1. throughput: enqueues --jobs no-op jobs through POST /v1/jobs/batch
   (1000 a request) with no worker running, starts --procs worker
   processes (each a redrive.Worker with --concurrency threads), and
   times the burn-down from the moment they are told to go until the
   workers were answered an applied complete for every job (each worker
   process tells the count it was answered; the API's count of the
   completed jobs checks the total once at the end): jobs/s.
2. latency: with the workers idle, long-polling, enqueues --latency-jobs
   jobs one at a time, each once the previous one's complete was applied
   (a worker process told it: no outcome's commit in the way), and
   reports, p50, p99 and max, the same quantities as bench.mjs:
   - attempted_at - created_at: the job's lease (the server's time of the
     lease's update) minus its enqueue (the server's time before the
     enqueue's transaction), both the server's clock;
   - to the handler's start (one machine's clock) from the job's
     enqueued_at (what the lease answered) and from the moment the enqueue
     request was sent.
3. unless --no-go: the same number of no-op jobs through Go workers in
   one process on a fresh SQLite file (`redrive bench throughput`), for
   reference: the engine without the protocol.

Nothing beyond the standard library and this package.
"""

import argparse
import json
import math
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "src"))

import redrive  # noqa: E402
from redrive._http import Connection, Endpoint  # noqa: E402
from redrive._wire import parse_time  # noqa: E402

TOKEN = "py-bench-token-0123456789abcdef0123"


class BenchWorker(redrive.Worker):
    """A worker that tells the parent, on stdout, how many completes the
    server answered applied ("completed N" after each answer that applied
    some): the parent learns the end from its children, as bench.mjs
    does, instead of polling the API's count (which costs serve CPU)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._bench_lock = threading.Lock()
        self._bench_applied = 0

    def _acknowledged(self, job, outcome, status, err):
        super()._acknowledged(job, outcome, status, err)
        if status == 200 and outcome.get("outcome") == "complete":
            with self._bench_lock:
                self._bench_applied += 1

    def _send_outcomes(self, conn, batch):
        try:
            super()._send_outcomes(conn, batch)
        finally:
            self._bench_report()

    def _send_one(self, conn, job, outcome, refused_before=False):
        try:
            super()._send_one(conn, job, outcome, refused_before)
        finally:
            self._bench_report()

    def _bench_report(self):
        with self._bench_lock:
            n, self._bench_applied = self._bench_applied, 0
            if n:
                say("completed %d" % n)


_stdout_lock = threading.Lock()


def say(line):
    with _stdout_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def worker_main(url, token, queue, concurrency):
    """A worker process: a no-op handler; waits for "go" on stdin, then
    for "latency" (from then on, each handler's start is told)."""
    w = BenchWorker(url, token, queues=[queue], concurrency=concurrency, poll=30.0)
    latency = threading.Event()

    @w.handler("noop")
    def noop(job):
        if latency.is_set():
            started = time.time() * 1000
            enq = job.enqueued_at.timestamp() * 1000 if job.enqueued_at else float("nan")
            say("started %d %.3f %.3f" % (job.id, started, enq))
        return None

    say("ready")
    if sys.stdin.readline().strip() != "go":
        return

    def commands():
        for line in sys.stdin:
            if line.strip() == "latency":
                latency.set()
                say("latency-ready")

    threading.Thread(target=commands, daemon=True).start()
    w.run()


class Children:
    """Reads the worker processes' lines: completions add up, handler
    starts and acknowledgements go to a queue."""

    def __init__(self, procs, jobs):
        import queue as _queue
        self.jobs = jobs
        self.completed = 0
        self.done = threading.Event()
        self._more = threading.Condition()
        self.events = _queue.Queue()
        for p in procs:
            threading.Thread(target=self._read, args=(p,), daemon=True).start()

    def wait_completed(self, n, timeout):
        """Waits until the workers were answered n completes applied."""
        with self._more:
            if not self._more.wait_for(lambda: self.completed >= n, timeout):
                raise SystemExit("the workers were answered %d completes applied, %d awaited" % (self.completed, n))

    def _read(self, p):
        for line in p.stdout:
            f = line.split()
            if not f:
                continue
            if f[0] == "completed":
                with self._more:
                    self.completed += int(f[1])
                    if self.completed >= self.jobs:
                        self.done.set()
                    self._more.notify_all()
            else:
                self.events.put(f)


def start_serve(binary, folder, extra):
    args = [binary, "serve", "--db", os.path.join(folder, "bench.db"), "--addr", "127.0.0.1:0",
            "--token", TOKEN, "--log-format", "json"] + extra
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=folder)
    found = threading.Event()
    addr = {}
    log = open(os.path.join(folder, "serve.log"), "wb")

    def read():
        for line in proc.stderr:
            log.write(line)
            if not found.is_set():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "redrive serving":
                    addr["addr"] = rec["addr"]
                    found.set()
        log.close()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(60):
        proc.kill()
        raise SystemExit("serve did not start; see %s" % os.path.join(folder, "serve.log"))
    return proc, "http://" + addr["addr"]


def percentiles(values):
    values = sorted(values)
    return "p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (percentile(values, 50), percentile(values, 99), values[-1])


def completed(conn, queue):
    return conn.call("GET", "/v1/jobs/count?queue=%s&state=completed" % queue)["count"]


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    # nearest rank: the smallest value with at least p% of them at or below it
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100.0 * len(sorted_values)) - 1))
    return sorted_values[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100000)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=64, help="handler threads per process (the lease batch)")
    ap.add_argument("--latency-jobs", type=int, default=500)
    ap.add_argument("--queue", default="bench")
    ap.add_argument("--url", help="an existing serve (its queue --queue must be empty)")
    ap.add_argument("--token", default=None)
    ap.add_argument("--bin", default=os.environ.get("REDRIVE_BIN"))
    ap.add_argument("--no-go", action="store_true", help="skip the Go workers' reference run")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (database, serve's log)")
    ap.add_argument("--worker", nargs=4, metavar=("URL", "TOKEN", "QUEUE", "CONCURRENCY"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker_main(a.worker[0], a.worker[1], a.worker[2], int(a.worker[3]))
        return

    serve = None
    folder = tempfile.mkdtemp(prefix="redrive-pybench-")
    binary = a.bin
    if not binary and not (a.url and a.no_go):
        binary = os.path.join(folder, "redrive")
        subprocess.run(["go", "build", "-o", binary, "./cmd/redrive"], cwd=HERE.parents[1], check=True)
    if a.url:
        url, token = a.url, a.token
    else:
        serve, url = start_serve(binary, folder, [])
        token = TOKEN
    client = redrive.Client(url, token)
    conn = Connection(Endpoint(url, token))
    procs = []
    try:
        print("python %s, %s, %d cores; %d jobs, %d worker processes x %d threads"
              % (platform.python_version(), platform.platform(), os.cpu_count(), a.jobs, a.procs, a.concurrency))
        t0 = time.monotonic()
        left = a.jobs
        while left > 0:
            n = min(1000, left)
            client.enqueue_many([{"kind": "noop", "queue": a.queue}] * n)
            left -= n
        enq = time.monotonic() - t0
        print("enqueue: %d jobs in %.2fs through POST /v1/jobs/batch: %.0f jobs/s" % (a.jobs, enq, a.jobs / enq))

        for _ in range(a.procs):
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", url, token or "", a.queue,
                                           str(a.concurrency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          text=True))
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise SystemExit("a worker process did not start")
        kids = Children(procs, a.jobs)
        t0 = time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        if not kids.done.wait(3600):
            raise SystemExit("the workers were answered %d completes of %d in an hour" % (kids.completed, a.jobs))
        took = time.monotonic() - t0
        counted = completed(conn, a.queue)
        if counted != a.jobs:
            raise SystemExit("the workers were answered %d completes applied; the API counts %d jobs completed of %d"
                             % (kids.completed, counted, a.jobs))
        print("throughput: %d no-op jobs in %.2fs through %d Python worker processes: %.0f jobs/s"
              % (a.jobs, took, a.procs, a.jobs / took))

        if a.latency_jobs > 0:
            for p in procs:
                p.stdin.write("latency\n")
                p.stdin.flush()
            for _ in procs:
                if kids.events.get(timeout=60)[0] != "latency-ready":
                    raise SystemExit("a worker process did not enter latency mode")
            # Let every worker's lease call be in its long-poll before the
            # first job (as bench.mjs does).
            time.sleep(0.5)
            server, from_enqueued, from_request = [], [], []
            for i in range(a.latency_jobs):
                kids.wait_completed(a.jobs + i, 60)
                sent = time.time() * 1000
                job = client.enqueue("noop", queue=a.queue)
                f = kids.events.get(timeout=60)
                if f[0] != "started" or int(f[1]) != job["id"]:
                    raise SystemExit("latency: %s, want job %d's start" % (" ".join(f), job["id"]))
                started, enq = float(f[2]), float(f[3])
                from_request.append(started - sent)
                if not math.isnan(enq):
                    from_enqueued.append(started - enq)
                j = client.get(job["id"])  # leased: attempted_at is set
                server.append((parse_time(j["attempted_at"]) - parse_time(j["created_at"])).total_seconds() * 1000)
            print("latency, %d jobs enqueued one at a time while the workers long-poll:" % a.latency_jobs)
            print("  attempted_at - created_at (server clock): %s, mean %.2f ms"
                  % (percentiles(server), statistics.mean(server)))
            if from_enqueued:
                print("  to the handler's start from enqueued_at: %s" % percentiles(from_enqueued))
            print("  to the handler's start from sending the enqueue request: %s" % percentiles(from_request))
        if not a.no_go:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(60)
            out = subprocess.run([binary, "bench", "throughput", "--jobs", str(a.jobs), "--json"],
                                 check=True, capture_output=True, text=True, cwd=folder).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print("go workers, for reference (redrive bench throughput --jobs %d: one process, %d workers, "
                  "no HTTP): %.0f jobs/s" % (a.jobs, r["params"]["workers"], r["durable_jobs_per_s"]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        client.close()
        conn.close()
        if serve is not None:
            serve.terminate()
            serve.wait(60)
        if a.keep:
            print("kept", folder)
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
