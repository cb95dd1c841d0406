"""Benchmark of Python workers on `redrive serve` over the worker protocol.

    python bench.py --jobs 100000 --procs 4

Starts `redrive serve` on a fresh SQLite file in a temporary folder (the
binary from --bin or $REDRIVE_BIN, else built from this checkout), or
uses --url. Then:

1. throughput: enqueues --jobs no-op jobs through POST /v1/jobs/batch
   (1000 a request) with no worker running, starts --procs worker
   processes (each a redrive.Worker with --concurrency threads), and
   times the burn-down from the moment they are told to go until the
   queue holds --jobs completed jobs: jobs/s.
2. latency: with the workers idle, long-polling, enqueues --latency-jobs
   jobs one at a time, each once the previous one completed, and reports
   lease-to-start latency: the job's attempted_at (when a worker leased
   it) minus its created_at (when it was enqueued), both the server's
   clock, p50, p99 and max.
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


def worker_main(url, token, queue, concurrency):
    """A worker process: a no-op handler; waits for "go" on stdin."""
    w = redrive.Worker(url, token, queues=[queue], concurrency=concurrency, poll=30.0)

    @w.handler("noop")
    def noop(job):
        return None

    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    w.run()


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
        t0 = time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        while True:
            done = completed(conn, a.queue)
            if done >= a.jobs:
                break
            time.sleep(0.02)  # polling the count: the only way to see the end
        took = time.monotonic() - t0
        print("throughput: %d no-op jobs in %.2fs through %d Python worker processes: %.0f jobs/s"
              % (a.jobs, took, a.procs, a.jobs / took))

        lat = []
        for _ in range(a.latency_jobs):
            job = client.enqueue("noop", queue=a.queue)
            while True:
                j = client.get(job["id"])
                if j["state"] == "completed":
                    break
                time.sleep(0.002)  # polling the job: nothing to wait on
            lat.append((parse_time(j["attempted_at"]) - parse_time(j["created_at"])).total_seconds() * 1000)
        lat.sort()
        print("lease-to-start latency (attempted_at - created_at) over %d jobs enqueued while the workers "
              "long-poll: p50 %.2f ms, p99 %.2f ms, max %.2f ms, mean %.2f ms"
              % (len(lat), percentile(lat, 50), percentile(lat, 99), lat[-1], statistics.mean(lat)))
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
