"""The bar chart of the main table (``--chart``, e.g. docs/benchmark.png), with matplotlib.

matplotlib is optional (the ``bench`` extra): without it the chart is skipped with a
message on stderr and the run goes on.
"""

from __future__ import annotations

import os
import platform

from .measure import Run, log
from .report import OPS, cpu_model, fmt_ns, run_rounds

__all__ = ["write_chart"]


def write_chart(run: Run, path: str) -> None:
    """Write a PNG bar chart (log scale, ns per item) of every library's main operations to
    ``path`` (its directory is created). Logs, and returns, if matplotlib is missing or
    nothing was measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("chart skipped: matplotlib is not installed (pip install -e '.[bench]')")
        return
    ops = [(op, h) for op, h in OPS if any(r.ns(op) is not None for r in run.main.values())]
    libs = [r for r in run.main.values() if any(r.ns(op) is not None for op, _ in ops)]
    if not libs:
        log("chart skipped: nothing measured")
        return
    fig, ax = plt.subplots(figsize=(11, 5.5))
    width = 0.8 / len(libs)
    for i, res in enumerate(libs):
        values = [res.ns(op) or 0.0 for op, _ in ops]
        xs = [j + (i - (len(libs) - 1) / 2) * width for j in range(len(ops))]
        bars = ax.bar(xs, values, width, label=res.adapter.label)
        for bar, v in zip(bars, values, strict=True):
            if v:
                ax.annotate(
                    fmt_ns(v),
                    (bar.get_x() + bar.get_width() / 2, v),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    rotation=90,
                    xytext=(0, 2),
                    textcoords="offset points",
                )
    ax.set_yscale("log")
    top = max(res.ns(op) or 0.0 for res in libs for op, _ in ops)
    ax.set_ylim(top=top * 3)  # room for the value labels
    ax.set_xticks(range(len(ops)), [h for _, h in ops])
    ax.set_ylabel("ns per item (log scale, lower is faster)")
    ax.set_title(
        f"{run.args.keys:,} URL-like keys, p = {run.args.fp_rate:g}, median of {run_rounds(run.main)} "
        f"round(s); {cpu_model()}, Python {platform.python_version()}",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log(f"chart written to {path}")
