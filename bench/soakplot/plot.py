#!/usr/bin/env python3
"""Draw the CSV of `redrive bench soak` as a PNG, one panel per measure.

    python3 -m venv /tmp/soakplot && /tmp/soakplot/bin/pip install -r bench/soakplot/requirements.txt
    /tmp/soakplot/bin/python bench/soakplot/plot.py OUT/soak-sqlite.csv docs/images/soak-sqlite.png

The PostgreSQL panels (the jobs table's tuples, index size and autovacuum
runs) are drawn when the CSV has them.
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1 << 20


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    return rows


def col(rows, name, scale=1.0):
    """The column as floats (None where empty), divided by scale."""
    return [float(r[name]) / scale if r.get(name) else None for r in rows]


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: plot.py SOAK.csv OUT.png [TITLE]")
    rows = read(sys.argv[1])
    title = sys.argv[3] if len(sys.argv) == 4 else sys.argv[1]
    t = [float(r["t_s"]) / 60 for r in rows]
    pg = bool(rows[0].get("pg_jobs_live"))

    panels = [
        ("jobs/s", [("enqueued", col(rows, "enqueue_per_s")), ("completed", col(rows, "completed_per_s")),
                    ("handled (observer)", [float(r["handled"]) / float(r["interval_s"]) for r in rows])], None, False),
        ("completed / enqueued", [("ratio", col(rows, "ratio"))], 0.95, False),
        ("retry lateness (ms)", [("p50", col(rows, "retry_p50_ms")), ("p99", col(rows, "retry_p99_ms")),
                                 ("first pickup p99", col(rows, "pickup_p99_ms"))], 5, True),
        ("RSS (MiB)", [("max in row", col(rows, "rss_max_bytes", MIB)), ("at row end", col(rows, "rss_bytes", MIB)),
                       ("Go heap in use", col(rows, "go_heap_bytes", MIB))], None, False),
        ("database size (MiB)", [("db", col(rows, "db_bytes", MIB))], None, False),
        ("jobs stored", [("completed", col(rows, "stored_completed")), ("dead", col(rows, "stored_dead")),
                         ("backlog", col(rows, "backlog"))], None, False),
    ]
    if pg:
        panels += [
            ("jobs table tuples", [("live", col(rows, "pg_jobs_live")), ("dead", col(rows, "pg_jobs_dead"))], None, False),
            ("jobs table size (MiB)", [("indexes", col(rows, "pg_jobs_index_bytes", MIB)),
                                       ("heap", col(rows, "pg_jobs_table_bytes", MIB))], None, False),
            ("autovacuum runs (cumulative)", [("jobs table", col(rows, "pg_jobs_autovacuum")),
                                              ("all tables", col(rows, "pg_autovacuum_all"))], None, False),
        ]

    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.1 * len(panels)), sharex=True)
    for ax, (name, series, goal, log) in zip(axes, panels):
        for label, ys in series:
            pts = [(x, y) for x, y in zip(t, ys) if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
        if goal is not None:
            ax.axhline(goal, color="red", linestyle="--", linewidth=1, label=f"goal {goal:g}")
        if log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_ylabel(name, fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    axes[-1].set_xlabel("minutes")
    axes[0].set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()
