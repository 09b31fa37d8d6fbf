"""The `memnav eval-bag` report: `metrics.json`, PNG plots (matplotlib, Agg backend) and `report.html`.

Files written into the report folder (and nowhere else):
- `metrics.json`: `EvalResult.to_json()` (NaN-free: undefined values are null);
- `trajectory.png`: reference (ground truth or odometry) and odometry trajectories with the scene graph drawn
  over them (places coloured by room, traversability edges, loop closures, goal poses);
- `metrics_over_time.png`: memory growth (places, edges, loop closures), goal similarity / belief with the
  stop decisions, per-frame latency;
- `latency.png`: per-stage latency distributions;
- `report.html`: the tables and the plots (relative links, so the folder can be moved as a whole).

Each file is written beside its place and renamed into it (`memnav.core.files.replace_files`): a file of an
earlier report in the folder is replaced whole, and a failed write (a full disk) keeps it as it was.
"""
from __future__ import annotations

import html
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from memnav.core.files import json_safe, replace_files
from memnav.eval.eval_bag import EvalResult

FILES = ("metrics.json", "report.html", "trajectory.png", "metrics_over_time.png", "latency.png")


def write_metrics(result: EvalResult, out_dir: Path) -> Path:
    path = out_dir / "metrics.json"
    replace_files({path: (json.dumps(json_safe(result.to_json()), indent=2, sort_keys=True, allow_nan=False)
                          + "\n").encode()})
    return path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(fig: Any, dpi: int = 90) -> bytes:
    """A matplotlib figure as PNG bytes; the figure is closed (to be written with others by `replace_files`)."""
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=dpi)
    finally:
        _plt().close(fig)
    return png.getvalue()


def save_figure(fig: Any, path: Path, dpi: int = 90) -> None:
    """Write a figure as PNG, whole or not at all (a failed write keeps the file that was there), and close it."""
    replace_files({path: figure_png(fig, dpi)})


def plot_trajectory(result: EvalResult, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 7))
    frames = result.frames
    ref_name = result.metrics["input"]["reference"].replace("_", " ")
    if frames:
        odom = np.array([(f.odom.x_m, f.odom.y_m) for f in frames])
        ref = np.array([(f.ref.x_m, f.ref.y_m) if f.ref is not None else (np.nan, np.nan) for f in frames])
        if ref_name != "odometry":
            ax.plot(ref[:, 0], ref[:, 1], "-", color="0.55", lw=1.0, label=f"{ref_name} trajectory")
        ax.plot(odom[:, 0], odom[:, 1], "--", color="tab:blue", lw=0.8, alpha=0.8, label="odometry")
    places = result.places
    if places:
        for a, b in result.edges:
            if a in places and b in places:
                ax.plot([places[a][0], places[b][0]], [places[a][1], places[b][1]], "-", color="tab:orange",
                        lw=0.7, alpha=0.7)
        xy = np.array([p[:2] for p in places.values()])
        rooms = np.array([p[3] for p in places.values()])
        sc = ax.scatter(xy[:, 0], xy[:, 1], c=rooms, cmap="tab20", s=18, zorder=3, edgecolors="k", linewidths=0.3,
                        label=f"places ({len(places)}, colour = room)")
        sc.set_clim(-1, max(19, int(rooms.max(initial=0))))
    lc = [places[pid] for _, pid in result.loop_closures if pid in places]
    if lc:
        arr = np.array([p[:2] for p in lc])
        ax.scatter(arr[:, 0], arr[:, 1], marker="x", color="red", s=50, zorder=4,
                   label=f"loop closures ({len(result.loop_closures)})")
    goals = [g.pose for g in result.goals if g.pose is not None]
    if goals:
        ax.scatter([g.x_m for g in goals], [g.y_m for g in goals], marker="*", color="tab:green", s=140, zorder=5,
                   edgecolors="k", linewidths=0.5, label="goal poses")
    ax.set(xlabel="x (m)", ylabel="y (m)", title="trajectory and scene graph (memory frame)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def plot_over_time(result: EvalResult, path: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    frames = result.frames
    t0 = frames[0].stamp_ns if frames else 0
    g = result.growth
    ax = axes[0]
    if g:
        t = [s["t_s"] for s in g]
        ax.plot(t, [s["places"] for s in g], label="places")
        ax.plot(t, [s["traversable_edges"] for s in g], label="traversability edges")
        ax.plot(t, [s["rooms"] for s in g], label="rooms")
        ax2 = ax.twinx()
        ax2.plot(t, [s["loop_closures"] for s in g], color="red", lw=1, label="loop closures (cumulative)")
        ax2.set_ylabel("loop closures")
        ax2.legend(loc="lower right", fontsize=8)
    ax.set(ylabel="count", title="long-term memory growth")
    if g:
        ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1]
    with_goal = [f for f in frames if f.goal_index >= 0]
    if with_goal:
        t = np.array([(f.stamp_ns - t0) / 1e9 for f in with_goal])
        ax.plot(t, [f.similarity for f in with_goal], lw=0.8, label="cosine similarity to goal")
        ax.plot(t, [f.belief for f in with_goal], lw=0.8, label="belief P(at goal)")
        stops = [f for f in with_goal if f.stop]
        if stops:
            ax.scatter([(f.stamp_ns - t0) / 1e9 for f in stops], [f.belief for f in stops], color="red", s=12,
                       zorder=3, label="VoI STOP")
        if result.goals and any(gl.pose is not None for gl in result.goals):
            at = _at_goal(result, with_goal)
            ax.fill_between(t, 0, 1, where=at, color="tab:green", alpha=0.15, step="mid", label="within radius")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(loc="upper left", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no goal images in the bag", ha="center", va="center", transform=ax.transAxes)
    ax.set(ylabel="value", title="stop controller")
    ax.grid(alpha=0.3)

    ax = axes[2]
    total = result.metrics["latency_ms"]
    if frames:
        t = np.array([(f.stamp_ns - t0) / 1e9 for f in frames])
        lat = np.asarray(result.frame_total_ms, dtype=np.float64)
        if len(lat) == len(t):
            ax.plot(t, lat, lw=0.6)
    ax.set(xlabel="bag time (s)", ylabel="ms / frame",
           title=f"per-frame processing time (p50 {total['total'].get('p50', float('nan')):.2f} ms)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


def _at_goal(result: EvalResult, frames: list) -> np.ndarray:
    radius = result.metrics["stop"].get("success_distance_m", 1.0)
    out = []
    for f in frames:
        g = result.goals[f.goal_index].pose
        # strictly within, as the metrics' frames_at_goal (and live success) count it
        out.append(g is not None and f.ref is not None and math.hypot(f.ref.x_m - g.x_m, f.ref.y_m - g.y_m) < radius)
    return np.array(out, dtype=bool)


def plot_latency(result: EvalResult, path: Path) -> None:
    plt = _plt()
    lat = result.metrics["latency_ms"]
    names = [k for k in ("read_decode", "encode", "memory_insert", "retrieve", "stop", "total") if lat[k]["count"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    p50 = [lat[k]["p50"] for k in names]
    p99 = [lat[k]["p99"] for k in names]
    x = np.arange(len(names))
    ax.bar(x - 0.2, p50, 0.4, label="p50")
    ax.bar(x + 0.2, p99, 0.4, label="p99")
    ax.set_xticks(x, [n.replace("_", "\n") for n in names])
    ax.set(ylabel="ms per frame", title="per-stage latency")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_figure(fig, path)


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}" if math.isfinite(v) else "n/a"
    return html.escape(str(v))


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def page_head(title: str) -> str:
    """The start of a report page (shared by the eval-bag and eval reports): title and style, up to <body>."""
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>"
            "body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}"
            "table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 8px;"
            "text-align:left}th{background:#f4f4f4;font-weight:normal}img{max-width:100%}"
            ".warn{color:#a40}</style></head><body>")


def render_html(result: EvalResult) -> str:
    m = json_safe(result.to_json())
    bag, inp, pr, lc, mem, stop, tm = (m["bag"], m["input"], m["place_recognition"], m["loop_closure"], m["memory"],
                                       m["stop"], m["timing"])
    parts = [
        page_head("memnav eval-bag report"),
        f"<h1>memnav eval-bag: {html.escape(Path(bag['path']).name)}</h1>",
        "<h2>Bag</h2>",
        _table([("path", bag["path"]), ("format / storage", f"{bag['format']} / {bag['storage']}"),
                ("metadata version", bag["metadata_version"]), ("ROS distro (typestore)",
                                                                f"{bag['ros_distro']} ({bag['typestore_distro']})"),
                ("messages", bag["message_count"]), ("duration (s)", tm["bag_duration_s"]),
                ("read sequentially (damaged index)", bag["salvaged"])]),
        _table([(t, f"{i['type']}: {i['count']}" + ("" if i["known_type"] else " (unknown type, skipped)"))
                for t, i in bag["topics"].items()]),
        "<h2>Input</h2>",
        _table([("frames evaluated", inp["frames"]), ("reference poses", inp["reference"]),
                ("goals (with pose)", f"{inp['goals']} ({inp['goals_with_pose']})"),
                ("truncated", inp["truncated"]), ("log times out of order", inp["log_time_out_of_order"])]
               + [(f"skipped: {k}", json.dumps(v) if isinstance(v, dict) else v)
                  for k, v in inp["skipped"].items() if v]),
    ]
    if inp["warnings"]:
        parts.append("<ul>" + "".join(f"<li class='warn'>{html.escape(w)}</li>" for w in inp["warnings"]) + "</ul>")
    parts += [
        "<h2>Timing</h2>",
        _table([("evaluated bag time (s)", tm["evaluated_duration_s"]), ("wall time (s)", tm["wall_s"]),
                ("realtime factor", tm["realtime_factor"]),
                ("frames / s", tm["frames_per_s"])]),
        _table([(f"{k} (ms p50 / p99)", f"{_fmt(v.get('p50'))} / {_fmt(v.get('p99'))}")
                for k, v in m["latency_ms"].items()]),
        "<img src='latency.png' alt='latency'>",
        "<h2>Place recognition</h2>",
        _table([(k, v) for k, v in pr.items()]),
        "<h2>Loop closure</h2>",
        _table([(k, v) for k, v in lc.items()]),
        "<h2>Long-term memory</h2>",
        _table([(k, v if not isinstance(v, dict) else json.dumps(v)) for k, v in mem.items() if k != "growth"]),
        "<img src='trajectory.png' alt='trajectory and scene graph'>",
        "<h2>Stop decisions</h2>",
    ]
    if stop.get("available"):
        parts.append(_table([(k, v if not isinstance(v, dict) else json.dumps(v)) for k, v in stop.items()
                             if k != "episodes"]))
        if stop["episodes"]:
            rows = "".join(f"<tr><td>{e['goal_stamp_ns']}</td><td>{e['frames']}</td><td>{_fmt(e['first_stop_frame'])}"
                           f"</td><td>{_fmt(e['first_stop_within_radius'])}</td><td>{_fmt(e['max_belief'])}</td></tr>"
                           for e in stop["episodes"])
            parts.append("<table><tr><th>goal stamp (ns)</th><th>frames</th><th>first STOP frame</th>"
                         f"<th>first STOP within radius</th><th>max belief</th></tr>{rows}</table>")
    else:
        parts.append(f"<p>{html.escape(stop.get('reason', 'not available'))}</p>")
    parts += ["<h2>Over time</h2>", "<img src='metrics_over_time.png' alt='metrics over time'>",
              "<h2>Configuration</h2>", _table(list(m["config"].items())), "</body></html>"]
    return "\n".join(parts)


def write_report(result: EvalResult, out_dir: Path) -> list[Path]:
    """Write every report file into `out_dir` (created); returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_metrics(result, out_dir)
    plot_trajectory(result, out_dir / "trajectory.png")
    plot_over_time(result, out_dir / "metrics_over_time.png")
    plot_latency(result, out_dir / "latency.png")
    replace_files({out_dir / "report.html": render_html(result).encode()})
    return [out_dir / f for f in FILES]
