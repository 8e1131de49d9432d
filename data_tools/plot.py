"""Pictures of a run: the data by agent and by final cluster, and the convergence curves;
and of a scaling study.

    python -m data_tools.plot DATA.h5 RESULT.h5 [--out PREFIX]
    python -m data_tools.plot scaling STRONG.csv WEAK.csv [--out PREFIX]

writes PREFIX-clusters.png (left: points coloured by agent; right: by final
cluster, with every agent's centers) and PREFIX-convergence.png (objective,
edge disagreement and changed assignments against iterations).  Data with
more than two features is shown on its first two principal components; large
files are thinned to --max-points evenly spaced rows.

`scaling` reads the CSVs of jobs/scaling.py and writes PREFIX-strong.png
(speed-up and efficiency against ranks, with the ideal lines) and
PREFIX-weak.png (efficiency against ranks); oversubscribed runs are hollow.
"""

import argparse
import csv
import math
import os
import sys

import numpy as np

from nkmpi.errors import InputError, Parser
from nkmpi.formats.dataset import coordinate_limit, open_dataset, read_rows
from nkmpi.formats.hdf5 import atomic_file
from nkmpi.formats.result import read_result

from .dataset import check_outputs, command, reading

#: Dots per inch: at least 10, where a 7-point label is a pixel high (FreeType refuses less);
#: at most 1000, a 12-inch figure 12000 pixels wide, which any machine draws.
MIN_DPI, MAX_DPI = 10, 1000

#: The metrics of a result that the convergence figure draws, against metrics/iteration.
CURVES = (("objective", "objective Q^rho", "log"), ("edge_disagreement", "edge disagreement", "log"),
          ("changed", "changed assignments", "symlog"))

SCALING_COLUMNS = ("ranks", "seconds_per_iteration", "oversubscribed")


def check_dpi(dpi):
    if not MIN_DPI <= dpi <= MAX_DPI:
        raise InputError(f"--dpi must be in {MIN_DPI}..{MAX_DPI}, got {dpi}")


def pyplot():
    """matplotlib's pyplot on its file-only backend.  Plots are an extra
    (pip install 'nkmpi[plot]'): nkmpi itself runs without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("plots need matplotlib: pip install 'nkmpi[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot
    return matplotlib.pyplot


def save(fig, path):
    """Write the figure to `path` whole, as a PNG, and close it; returns the path."""
    try:
        with atomic_file(path) as temporary:
            fig.savefig(temporary, format="png")
    finally:
        pyplot().close(fig)
    return path


def check_result(info, result, data, result_path):
    """Refuse a result that is not one of this dataset's, or holds what cannot be drawn."""
    centers, assignments = result["centers"], result["assignments"]
    if (centers.shape[0], centers.shape[2], len(assignments)) != (info.n_agents, info.n_features, info.n_points):
        raise InputError(f"{result_path} does not belong to {data}: agent, feature or point counts differ")
    limit = coordinate_limit(info.dtype, info.n_features)
    if centers.dtype.kind not in "iuf" or not (np.abs(centers) <= limit).all():
        raise InputError(f"{result_path}: 'centers' must be numbers within +-{limit:.3g}")
    if assignments.dtype.kind not in "iu" or not ((0 <= assignments) & (assignments < centers.shape[1])).all():
        raise InputError(f"{result_path}: 'assignments' must be cluster ids 0..{centers.shape[1] - 1}")
    for name in ("iteration",) + tuple(name for name, _, _ in CURVES):
        values = result["metrics"][name]
        if values.dtype.kind not in "biuf" or not np.isfinite(values).all():
            raise InputError(f"{result_path}: 'metrics/{name}' must be finite numbers")


def thinned_rows(info, assignments, max_points):
    """Every step-th row's point, agent and final label (step so that at most max_points remain),
    the points checked to be data nkmpi runs on (finite, within its coordinate limit)."""
    step = -(-info.n_points // max_points)
    points = read_rows(info, info.block(0, info.n_agents), step).astype(np.float64)
    rows = np.arange(0, info.n_points, step)
    agents = np.searchsorted(info.offsets, rows, side="right") - 1
    return points, agents, assignments[::step]


def projection(points):
    """(mean, axes) mapping data to 2-D: the identity for p <= 2, else the top two principal axes."""
    mean = points.mean(axis=0)
    p = points.shape[1]
    if p <= 2:
        return mean * 0, np.eye(p, 2)
    _, _, vt = np.linalg.svd(points - mean, full_matrices=False)
    return mean, vt[:2].T if len(vt) >= 2 else np.eye(p, 2)      # one point has one axis


def plot_clusters(points, agents, labels, centers, out, size=(12, 5.5), dpi=100):
    mean, axes = projection(points)
    xy = (points - mean) @ axes
    centers_xy = (centers.reshape(-1, centers.shape[-1]) - mean) @ axes
    fig, (left, right) = pyplot().subplots(1, 2, figsize=size, dpi=dpi, sharex=True, sharey=True)
    n_agents = int(agents.max()) + 1 if len(agents) else 1
    left.scatter(xy[:, 0], xy[:, 1], c=agents, cmap="tab20" if n_agents <= 20 else "turbo", s=4,
                 linewidths=0)
    left.set_title(f"data by agent ({n_agents} agents)")
    right.scatter(xy[:, 0], xy[:, 1], c=labels, cmap="tab10" if labels.max() < 10 else "turbo", s=4,
                  linewidths=0)
    right.scatter(centers_xy[:, 0], centers_xy[:, 1], marker="x", c="black", s=30, linewidths=1,
                  label="agents' centers")
    right.set_title(f"final clusters, K = {centers.shape[1]}")
    right.legend(loc="best")
    labels_xy = ("x1", "x2") if points.shape[1] <= 2 else ("PC1", "PC2")
    for ax in (left, right):
        ax.set_xlabel(labels_xy[0])
    left.set_ylabel(labels_xy[1])
    fig.tight_layout()
    save(fig, out)


def plot_convergence(metrics, out, size=(12, 4), dpi=100):
    fig, axes = pyplot().subplots(1, 3, figsize=size, dpi=dpi)
    iteration = metrics["iteration"]
    for ax, (name, title, scale) in zip(axes, CURVES):
        values = metrics[name]
        ax.plot(iteration, values, marker="." if len(values) < 50 else None)
        if scale == "log" and (values > 0).all():
            ax.set_yscale("log")
        elif scale == "symlog":
            ax.set_yscale("symlog", linthresh=1)
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    save(fig, out)


def plot_run(data, result_path, prefix, max_points=20000, dpi=100):
    """Write PREFIX-clusters.png and PREFIX-convergence.png; returns their paths."""
    check_dpi(dpi)
    if max_points < 1:
        raise InputError(f"--max-points must be at least 1, got {max_points}")
    clusters, convergence = f"{prefix}-clusters.png", f"{prefix}-convergence.png"
    check_outputs([clusters, convergence], {"the dataset": data, "the result": result_path})
    info = open_dataset(data)
    if info.n_points == 0:
        raise InputError(f"{data}: no points to draw")
    result = read_result(result_path)
    check_result(info, result, data, result_path)
    points, agents, labels = thinned_rows(info, result["assignments"], max_points)
    plot_clusters(points, agents, labels, result["centers"], clusters, dpi=dpi)
    plot_convergence(result["metrics"], convergence, dpi=dpi)
    return clusters, convergence


def _timing(row):
    """(ranks, seconds, oversubscribed) of a CSV row; None unless ranks is a count of MPI ranks
    (a C int >= 1) and seconds a finite time > 0."""
    try:
        ranks, seconds = int(row["ranks"]), float(row["seconds_per_iteration"])
        crowded = row["oversubscribed"] == "True"
    except (KeyError, TypeError, ValueError):
        return None
    return (ranks, seconds, crowded) if 1 <= ranks < 2**31 and 0 < seconds < math.inf else None


def read_scaling(path):
    """(ranks, seconds per iteration, oversubscribed) of a jobs/scaling.py CSV, by ranks."""
    with reading(path), open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise InputError(f"{path}: no rows")
    timings = [_timing(row) for row in rows]
    if None in timings:
        raise InputError(f"{path} row {timings.index(None) + 1}: expected the columns {', '.join(SCALING_COLUMNS)}, "
                         "ranks an integer >= 1 and seconds a finite number > 0")
    ranks, seconds, crowded = map(np.array, zip(*timings))
    order = np.argsort(ranks, kind="stable")
    return ranks[order], seconds[order], crowded[order]


def _points(ax, x, y, crowded, label):
    ax.plot(x, y, "-", color="C0", label=label)
    ax.plot(x[~crowded], y[~crowded], "o", color="C0")
    if crowded.any():
        ax.plot(x[crowded], y[crowded], "o", mfc="none", color="C0", label="oversubscribed")


def _efficiency(ax, ranks, efficiency, crowded, title):
    _points(ax, ranks, efficiency, crowded, "nkmpi")
    ax.axhline(1, ls="--", color="gray", label="ideal")
    ax.set(title=title, xlabel="ranks", ylabel="efficiency", ylim=(0, 1.1))


def _save(fig, axes, path):
    for ax in axes:
        ax.legend()
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return save(fig, path)


def plot_scaling(strong_csv, weak_csv, prefix, dpi=100):
    """Speed-up and efficiency PNGs from jobs/scaling.py's CSVs; returns their paths."""
    if not (strong_csv or weak_csv):
        raise InputError("give a strong- or a weak-scaling CSV, or both")
    check_dpi(dpi)
    check_outputs([f"{prefix}-{kind}.png" for kind, table in (("strong", strong_csv), ("weak", weak_csv)) if table],
                  {"the strong-scaling CSV": strong_csv, "the weak-scaling CSV": weak_csv})
    written = []
    if strong_csv:
        ranks, seconds, crowded = read_scaling(strong_csv)
        speedup = seconds[0] * ranks[0] / seconds
        fig, (left, right) = pyplot().subplots(1, 2, figsize=(10, 4), dpi=dpi)
        _points(left, ranks, speedup, crowded, "nkmpi")
        left.plot(ranks, ranks, "--", color="gray", label="ideal")
        left.set(title="strong scaling: speed-up", xlabel="ranks", ylabel="speed-up")
        _efficiency(right, ranks, speedup / ranks, crowded, "strong scaling: efficiency")
        written.append(_save(fig, (left, right), f"{prefix}-strong.png"))
    if weak_csv:
        ranks, seconds, crowded = read_scaling(weak_csv)
        fig, ax = pyplot().subplots(figsize=(5, 4), dpi=dpi)
        _efficiency(ax, ranks, seconds[0] / seconds, crowded, "weak scaling: efficiency")
        written.append(_save(fig, (ax,), f"{prefix}-weak.png"))
    return written


@command
def main_scaling(argv):
    parser = Parser(prog="python -m data_tools.plot scaling",
                    description="Speed-up and efficiency plots of jobs/scaling.py's CSVs.")
    parser.add_argument("strong", help="strong.csv (or - to skip)")
    parser.add_argument("weak", nargs="?", default=None, help="weak.csv")
    parser.add_argument("--out", default=None, help="prefix of the PNG files (default: next to the CSV)")
    parser.add_argument("--dpi", type=int, default=100, help=f"{MIN_DPI}..{MAX_DPI} (default 100)")
    args = parser.parse_args(argv)
    pyplot()                         # matplotlib present, before any work
    strong = None if args.strong == "-" else args.strong
    prefix = args.out or os.path.join(os.path.dirname(strong or args.weak or "") or ".", "scaling")
    for path in plot_scaling(strong, args.weak, prefix, args.dpi):
        print(f"wrote {path}")


@command
def main_run(argv):
    parser = Parser(prog="python -m data_tools.plot", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="dataset v1 file")
    parser.add_argument("result", help="result v1 file of a run on it")
    parser.add_argument("--out", default=None, help="prefix of the PNG files (default: RESULT without .h5)")
    parser.add_argument("--max-points", type=int, default=20000, help="rows drawn at most (default 20000)")
    parser.add_argument("--dpi", type=int, default=100, help=f"{MIN_DPI}..{MAX_DPI} (default 100)")
    args = parser.parse_args(argv)
    pyplot()                         # matplotlib present, before any work
    prefix = args.out or os.path.splitext(args.result)[0]
    for path in plot_run(args.data, args.result, prefix, args.max_points, args.dpi):
        print(f"wrote {path}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    return main_scaling(argv[1:]) if argv and argv[0] == "scaling" else main_run(argv)


if __name__ == "__main__":
    sys.exit(main())
