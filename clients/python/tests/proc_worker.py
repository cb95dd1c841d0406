"""A worker process for the tests that signal or kill one.

    python proc_worker.py URL TOKEN GRACE

Its handler of kind "hold" prints "started <id>" and waits for a line on
stdin, then completes; the process runs the Worker in its main thread, so
SIGTERM and SIGINT stop it gracefully.
"""

import logging
import sys

import redrive


def main():
    url, token, grace = sys.argv[1], sys.argv[2], float(sys.argv[3])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    worker = redrive.Worker(url, token, queues=["py"], concurrency=2, poll=5.0, grace=grace)

    @worker.handler("hold")
    def hold(job):
        print("started %d %s" % (job.id, worker.name), flush=True)
        line = sys.stdin.readline()
        return {"line": line.strip()}

    print("ready", flush=True)
    worker.run()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
