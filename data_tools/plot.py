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
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nkmpi.errors import InputError  # noqa: E402
from nkmpi.io import open_dataset, read_result  # noqa: E402


def thinned_rows(info, result_path, max_points):
    """Every step-th row's point, agent and final label (step so that at most max_points remain)."""
    step = max(1, -(-info.n_points // max_points))
    with h5py.File(info.path, "r") as f:
        points = f["points"][::step].astype(np.float64)
    with h5py.File(result_path, "r") as f:
        labels = f["assignments"][::step]
    rows = np.arange(0, info.n_points, step)
    agents = np.searchsorted(info.offsets, rows, side="right") - 1
    return points, agents, labels


def projection(points):
    """(mean, axes) mapping data to 2-D: the identity for p <= 2, else the top two principal axes."""
    mean = points.mean(axis=0)
    p = points.shape[1]
    if p <= 2:
        return mean * 0, np.eye(p, 2)
    _, _, vt = np.linalg.svd(points - mean, full_matrices=False)
    return mean, vt[:2].T


def plot_clusters(points, agents, labels, centers, out, size=(12, 5.5), dpi=100):
    mean, axes = projection(points)
    xy = (points - mean) @ axes
    centers_xy = (centers.reshape(-1, centers.shape[-1]) - mean) @ axes
    fig, (left, right) = plt.subplots(1, 2, figsize=size, dpi=dpi, sharex=True, sharey=True)
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
    fig.savefig(out)
    plt.close(fig)


def plot_convergence(metrics, out, size=(12, 4), dpi=100):
    fig, axes = plt.subplots(1, 3, figsize=size, dpi=dpi)
    iteration = metrics["iteration"]
    curves = [("objective", "objective Q^rho", "log"), ("edge_disagreement", "edge disagreement", "log"),
              ("changed", "changed assignments", "symlog")]
    for ax, (name, title, scale) in zip(axes, curves):
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
    fig.savefig(out)
    plt.close(fig)


def plot_run(data, result_path, prefix, max_points=20000, dpi=100):
    """Write PREFIX-clusters.png and PREFIX-convergence.png; returns their paths."""
    info = open_dataset(data)
    result = read_result(result_path)
    if result["centers"].shape[0] != info.n_agents or len(result["assignments"]) != info.n_points:
        raise InputError(f"{result_path} does not belong to {data}: agent or point counts differ")
    points, agents, labels = thinned_rows(info, result_path, max_points)
    clusters, convergence = f"{prefix}-clusters.png", f"{prefix}-convergence.png"
    plot_clusters(points, agents, labels, result["centers"], clusters, dpi=dpi)
    plot_convergence(result["metrics"], convergence, dpi=dpi)
    return clusters, convergence


def read_scaling(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise InputError(f"{path}: no rows")
    ranks = np.array([int(r["ranks"]) for r in rows])
    seconds = np.array([float(r["seconds_per_iteration"]) for r in rows])
    crowded = np.array([r["oversubscribed"] == "True" for r in rows])
    order = np.argsort(ranks)
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
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_scaling(strong_csv, weak_csv, prefix, dpi=100):
    """Speed-up and efficiency PNGs from jobs/scaling.py's CSVs; returns their paths."""
    written = []
    if strong_csv:
        ranks, seconds, crowded = read_scaling(strong_csv)
        speedup = seconds[0] * ranks[0] / seconds
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=dpi)
        _points(left, ranks, speedup, crowded, "nkmpi")
        left.plot(ranks, ranks, "--", color="gray", label="ideal")
        left.set(title="strong scaling: speed-up", xlabel="ranks", ylabel="speed-up")
        _efficiency(right, ranks, speedup / ranks, crowded, "strong scaling: efficiency")
        written.append(_save(fig, (left, right), f"{prefix}-strong.png"))
    if weak_csv:
        ranks, seconds, crowded = read_scaling(weak_csv)
        fig, ax = plt.subplots(figsize=(5, 4), dpi=dpi)
        _efficiency(ax, ranks, seconds[0] / seconds, crowded, "weak scaling: efficiency")
        written.append(_save(fig, (ax,), f"{prefix}-weak.png"))
    return written


def main_scaling(argv):
    parser = argparse.ArgumentParser(prog="python -m data_tools.plot scaling",
                                     description="Speed-up and efficiency plots of jobs/scaling.py's CSVs.")
    parser.add_argument("strong", help="strong.csv (or - to skip)")
    parser.add_argument("weak", nargs="?", default=None, help="weak.csv")
    parser.add_argument("--out", default=None, help="prefix of the PNG files (default: next to the CSV)")
    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    strong = None if args.strong == "-" else args.strong
    prefix = args.out or os.path.join(os.path.dirname(strong or args.weak) or ".", "scaling")
    try:
        for path in plot_scaling(strong, args.weak, prefix, args.dpi):
            print(f"wrote {path}")
    except (InputError, OSError, KeyError, ValueError) as exc:
        print(f"nkmpi: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "scaling":
        return main_scaling(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m data_tools.plot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="dataset v1 file")
    parser.add_argument("result", help="result v1 file of a run on it")
    parser.add_argument("--out", default=None, help="prefix of the PNG files (default: RESULT without .h5)")
    parser.add_argument("--max-points", type=int, default=20000, help="rows drawn at most (default 20000)")
    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    prefix = args.out or os.path.splitext(args.result)[0]
    try:
        for path in plot_run(args.data, args.result, prefix, args.max_points, args.dpi):
            print(f"wrote {path}")
    except InputError as exc:
        print(f"nkmpi: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
