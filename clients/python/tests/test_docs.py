"""The examples of docs/python.md and the README run as they are written."""

import os
import re
import signal
import subprocess
import threading

import pytest

from conftest import PYTHON, REPO

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def first_python_block(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"```python\n(.*?)```", text, re.S)
    assert m, "%s: no python block" % path
    return m.group(1)


def run_example(serve, tmp_path, code, until, expect=None):
    """Runs code (its server URL made serve's) until job 1 satisfies until
    and, with expect, the example printed a line holding it; then SIGTERM
    must stop it cleanly. Answers its output."""
    code = code.replace("http://127.0.0.1:8080", serve.url)
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([PYTHON, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    lines = []
    seen = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if expect and expect in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        serve.wait_job(1, until, timeout=60, what="the example's end", missing_ok=True)
        if expect:
            assert seen.wait(30), "the example did not print %r: %s" % (expect, "".join(lines))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, "".join(lines)
        reader.join(10)
        return "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("serve", [{"token": None}], indirect=True)
def test_docs_python_example(serve, tmp_path):
    code = first_python_block(os.path.join(REPO, "docs", "python.md"))
    run_example(serve, tmp_path, code, lambda j: j["state"] == "completed",
                expect="job 1 completed after 1 attempt(s)")
    job = serve.client.get(1)
    assert job["progress"] == {"done": 10, "total": 10, "at": job["progress"]["at"]}


@pytest.mark.parametrize("serve", [{"token": None}], indirect=True)
def test_readme_python_worker(serve, tmp_path):
    code = first_python_block(os.path.join(REPO, "README.md"))
    assert len(code.strip().splitlines()) <= 10
    run_example(serve, tmp_path, code, lambda j: j["state"] == "completed" and j["kind"] == "resize")
