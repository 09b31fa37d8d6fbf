"""`memnav memory`: look into a stored long-term memory without changing it.

    memnav memory info DB [--check] [--json PATH]       counts, time span, rooms, objects (text or JSON)
    memnav memory show DB --out map.png                 top-down figure: places by room, edges, objects,
                                                        the most visited places' keyframes
    memnav memory export DB --out graph.graphml|.json   the scene graph for networkx, Gephi, yEd, ...
    memnav memory backup DB OUT                         a consistent, checked copy, also while a node writes

DB is a memory database as the memory node (`db_path`), the fused stack or `memnav eval --lifelong
--memory-dir` write it. It is opened read-only (`memnav.core.memory.snapshot`), so a memory in use by a
running node can be inspected, and a refused file (not a memnav memory, newer schema, damaged) is named with
the reason and left as it is. Outputs (the figure, the export, the `--json` file) are replaced whole if they exist
(written beside and renamed into place, so a failed write keeps the old file); `backup` never overwrites. JSON
holds no NaN or Infinity: a value a damaged memory stores as such is written as null.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from memnav.cli import STDOUT_ONLY
from memnav.core.files import json_safe, replace_files
from memnav.core.memory.scene_graph import EdgeKind
from memnav.core.memory.snapshot import MemorySnapshot, read_snapshot, read_thumbnails, summarize, to_networkx
from memnav.paths import lifelong_map_path, same_file

EXPORT_FORMATS = (".graphml", ".json")
# beyond these, a figure's labels would cover each other and take most of its drawing time (a 100k-place
# memory with thousands of rooms and objects): they are left out, and the figure says so
MAX_ROOM_LABELS = 60
MAX_OBJECT_LABELS = 120
MAX_HEADING_TICKS = 5000   # a 25 cm heading tick is under a pixel on the figure of a memory that large


def json_text(value: object, indent: int | None = 2) -> str:
    """`value` as strict JSON: NaN and infinities (which json.dumps writes, but JSON has not) become null."""
    return json.dumps(json_safe(value), indent=indent, allow_nan=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("info", help="counts, time span, rooms and objects of a memory database",
                       description="Print what a memory database holds (read-only).",
                       formatter_class=parser.formatter_class)
    p.add_argument("db", type=Path, metavar="DB", help="memory database file (.db / .sqlite)")
    p.add_argument("--check", action="store_true",
                   help="also run SQLite's integrity check over the whole file (reads all of it)")
    p.add_argument("--json", type=Path, nargs="?", const=STDOUT_ONLY, default=None, metavar="PATH",
                   help="write the summary as JSON to PATH (without PATH: JSON on stdout instead of text)")
    p = sub.add_parser("show", help="top-down figure of a memory: places by room, edges, objects, keyframes",
                       description="Draw a memory database from above (read-only): places coloured by room and "
                                   "sized by visits, traversability edges, objects, room labels, and the "
                                   "keyframes of the most visited places.",
                       formatter_class=parser.formatter_class)
    p.add_argument("db", type=Path, metavar="DB", help="memory database file (.db / .sqlite)")
    p.add_argument("--out", type=Path, required=True, metavar="PNG",
                   help="figure to write (.png; replaced if it exists)")
    p.add_argument("--map", type=Path, default=None, metavar="NPZ",
                   help="occupancy map to draw underneath (default: DB's `<name>.map.npz` beside it, as "
                        "`memnav eval --lifelong` keeps one, when present)")
    p.add_argument("--no-map", action="store_true", help="draw no occupancy map even when one is beside DB")
    p.add_argument("--thumbnails", type=int, default=8, metavar="N",
                   help="show the keyframes of the N most visited places (0 = none)")
    p = sub.add_parser("export", help="write the scene graph as GraphML or node-link JSON",
                       description="Export a memory database's scene graph (read-only) for other tools: "
                                   "GraphML (.graphml: Gephi, yEd, networkx) or networkx node-link JSON (.json).",
                       formatter_class=parser.formatter_class)
    p.add_argument("db", type=Path, metavar="DB", help="memory database file (.db / .sqlite)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="output file (replaced if it exists); its suffix picks the format: "
                        + ", ".join(EXPORT_FORMATS))
    p.add_argument("--embeddings", action="store_true",
                   help="include place and object embeddings (JSON only: GraphML attributes cannot be lists)")
    p = sub.add_parser("backup", help="a consistent, checked copy of a memory database, also while a node writes",
                       description="Copy a memory database to a new file with SQLite's online backup: the copy "
                                   "holds every transaction committed when it starts, also while a memory or "
                                   "policy node keeps writing (a plain file copy of a live WAL database can miss "
                                   "commits or be torn). The copy is integrity-checked before it is renamed into "
                                   "place, and never overwrites a file. The occupancy map beside DB "
                                   "(`<name>.map.npz`, as the policy node's lifelong_dir and `memnav eval "
                                   "--lifelong` keep one) is copied beside OUT. To restore, stop the node and "
                                   "copy OUT (and its map) to the node's path.",
                       formatter_class=parser.formatter_class)
    p.add_argument("db", type=Path, metavar="DB", help="memory database file (.db / .sqlite)")
    p.add_argument("out", type=Path, metavar="OUT", help="the copy to write (a new file; e.g. backups/house.db)")
    p.add_argument("--no-map", action="store_true", help="copy the database only, not the occupancy map beside it")


def _print_summary(info: dict) -> None:
    mib = info["file_bytes"] / 2**20
    print(f"{info['file']}: memnav memory, schema {info['schema_version']}, {info['embedding_dim']}-d embeddings, "
          f"{mib:.2f} MiB")
    print(f"  places   {info['places']} ({info['places_in_a_room']} in a room, {info['isolated_places']} without a "
          f"traversability edge); visits {info['visits_total']}"
          + (f" (mean {info['visits_per_place_mean']:.2f}, max {info['visits_per_place_max']} per place)"
             if info["places"] else ""))
    print(f"  rooms    {info['rooms']} ({len(info['room_adjacency'])} adjacent pairs)")
    labels = ", ".join(f"{k} {v}" for k, v in info["objects_by_label"].items())
    print(f"  objects  {info['objects']}" + (f": {labels}" if labels else ""))
    print("  edges    " + ", ".join(f"{k} {v}" for k, v in info["edges"].items()))
    if info["first_seen"] is not None:
        print(f"  seen     {info['first_seen']} .. {info['last_seen']} (span {info['span_s']:.1f} s)")
    if info["extent_m"] is not None:
        e = info["extent_m"]
        print(f"  extent   x {e['x_min']:.2f} .. {e['x_max']:.2f} m, y {e['y_min']:.2f} .. {e['y_max']:.2f} m "
              f"(memory frame)")


def _info(args: argparse.Namespace) -> int:
    info = summarize(read_snapshot(args.db, check_integrity=args.check))
    if args.check:
        info["integrity_check"] = "ok"   # read_snapshot raised otherwise
    if args.json == STDOUT_ONLY:
        print(json_text(info))
        return 0
    if args.json is not None:   # before the summary is printed: a refused path is the only output
        replace_files({args.json: (json_text(info) + "\n").encode()})
    _print_summary(info)
    if args.check:
        print("  integrity check: ok")
    return 0


def _occupancy(path: Path) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """An RGB image of a saved occupancy map's known cells (surface colours where seen) and its extent (m)."""
    from memnav.core.exploration import ExplorerConfig, MapFileError, OccupancyMap

    try:
        with np.load(path, allow_pickle=False) as z:
            cell_m, cells = float(z["cell_m"]), int(z["cells"])
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise MapFileError(f"{path}: not a readable occupancy map ({err})") from err
    m = OccupancyMap.load(path, replace(ExplorerConfig(), cell_m=cell_m, size_m=cells * cell_m))
    img = np.ones((*m.free.shape, 3), np.float32)
    img[m.free > 0] = 0.93
    occ = m.occ > m.free
    img[occ] = 0.35
    coloured = occ & (m.colour_hits > 0)
    img[coloured] = np.clip(m.colour_sum[coloured] / m.colour_hits[coloured][:, None], 0, 1)
    rows = np.flatnonzero((m.free > 0).any(axis=1) | (m.occ > 0).any(axis=1))
    cols = np.flatnonzero((m.free > 0).any(axis=0) | (m.occ > 0).any(axis=0))
    if rows.size == 0:
        raise MapFileError(f"{path}: the occupancy map is empty")
    r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    x0, y0 = m.origin[0] + c0 * cell_m, m.origin[1] + r0 * cell_m
    return img[r0:r1, c0:c1], (x0, x0 + (c1 - c0) * cell_m, y0, y0 + (r1 - r0) * cell_m)


def draw_memory(snap: MemorySnapshot, out: Path, *, occupancy: tuple | None = None,
                thumbnails: dict[int, np.ndarray] | None = None) -> list[str]:
    """Top-down figure of a memory: places coloured by room (size by visits, a tick for heading), traversability
    edges, objects, room ids, and beside it the given keyframes, numbered on the map. Returns what was left out
    (room ids beyond MAX_ROOM_LABELS rooms, object labels beyond MAX_OBJECT_LABELS objects, heading ticks
    beyond MAX_HEADING_TICKS places), as the figure's
    title says."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    g = snap.graph
    thumbnails = thumbnails or {}
    left_out: list[str] = []
    cols = min(4, len(thumbnails))
    rows = math.ceil(len(thumbnails) / cols) if cols else 0
    fig = plt.figure(figsize=(11 if cols else 8, 8))
    ax = fig.add_axes((0.06, 0.06, 0.6 if cols else 0.88, 0.86))
    if occupancy is not None:
        img, extent = occupancy
        ax.imshow(img, origin="lower", extent=extent, interpolation="nearest", zorder=0)
    pos = {int(p): (float(x), float(y)) for p, (x, y) in zip(g.place_ids.tolist(), g.place_poses[:, :2].tolist())}
    segs = [(pos[a], pos[b]) for a, b, k, _ in g.edges if k == EdgeKind.TRAVERSABLE and a in pos and b in pos]
    if segs:
        ax.add_collection(LineCollection(segs, colors="0.45", linewidths=0.6, alpha=0.7, zorder=1))
    cmap = plt.get_cmap("tab20")
    room_ids = sorted({int(r) for r in g.place_rooms.tolist() if r >= 0})
    colour_of = {r: cmap(i % 20) for i, r in enumerate(room_ids)}
    colours = [colour_of.get(int(r), (0.5, 0.5, 0.5, 1.0)) for r in g.place_rooms.tolist()]
    if len(g.place_ids):
        xy, yaw = g.place_poses[:, :2], g.place_poses[:, 2]
        ax.scatter(xy[:, 0], xy[:, 1], s=12 + 10 * np.sqrt(g.place_visits), c=colours, edgecolors="k",
                   linewidths=0.3, zorder=2)
        if len(xy) <= MAX_HEADING_TICKS:
            tick = 0.25
            ax.add_collection(LineCollection(np.stack([xy, xy + tick * np.column_stack([np.cos(yaw), np.sin(yaw)])],
                                                      1), colors="k", linewidths=0.6, zorder=2))
        else:
            left_out.append("heading ticks")
        if len(room_ids) <= MAX_ROOM_LABELS:
            for r in room_ids:
                cx, cy = xy[g.place_rooms == r].mean(axis=0)
                ax.text(cx, cy, f"room {r}", fontsize=7, ha="center", va="center", zorder=4,
                        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": colour_of[r], "alpha": 0.8})
        else:
            left_out.append(f"{len(room_ids)} room ids")
    if g.objects:
        oxy = np.array([o.position_m[:2] for o in g.objects])
        ax.scatter(oxy[:, 0], oxy[:, 1], marker="^", s=40, c="crimson", edgecolors="k", linewidths=0.4, zorder=3,
                   label="objects")
        if len(g.objects) <= MAX_OBJECT_LABELS:
            for o in g.objects:
                ax.annotate(o.label, o.position_m[:2], fontsize=6, xytext=(3, 3), textcoords="offset points",
                            zorder=4)
        else:
            left_out.append(f"{len(g.objects)} object labels")
        ax.legend(loc="upper right", fontsize=7)
    for i, pid in enumerate(thumbnails):
        if pid in pos:
            ax.annotate(str(i + 1), pos[pid], fontsize=8, weight="bold", color="k", xytext=(4, -10),
                        textcoords="offset points", zorder=5)
    ax.set_aspect("equal")
    ax.autoscale_view()
    ax.set_xlabel("x (m, memory frame)")
    ax.set_ylabel("y (m)")
    ax.set_title(f"{Path(snap.path).name}: {len(g.place_ids)} places, {len(g.rooms)} rooms, {len(g.objects)} "
                 f"objects, {len(segs)} traversability edges"
                 + (f"\n(labels left out: {', '.join(left_out)})" if left_out else ""), fontsize=10)
    for i, (pid, thumb) in enumerate(thumbnails.items()):
        r, c = divmod(i, cols)
        w, h = 0.29 / cols, 0.86 / max(rows, 4)
        tax = fig.add_axes((0.69 + c * (w + 0.005), 0.92 - (r + 1) * h, w, h * 0.85))
        tax.imshow(thumb, interpolation="nearest")
        visits = int(g.place_visits[np.flatnonzero(g.place_ids == pid)[0]])
        tax.set_title(f"{i + 1}: place {pid}, {visits}x", fontsize=6)
        tax.axis("off")
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=120)
    finally:
        plt.close(fig)
    replace_files({out: png.getvalue()})   # a failed write keeps the old figure
    return left_out


def _show(args: argparse.Namespace) -> int:
    if args.thumbnails < 0:
        raise ValueError(f"--thumbnails must be >= 0, got {args.thumbnails}")
    if args.out.suffix.lower() != ".png":
        raise ValueError(f"--out {args.out}: the figure is written as PNG; name it .png")
    snap = read_snapshot(args.db)
    map_path = args.map
    if map_path is None and not args.no_map:
        beside = lifelong_map_path(args.db.parent, args.db.stem)   # the map a lifelong run keeps beside it
        map_path = beside if beside.is_file() else None
    elif map_path is not None and not map_path.is_file():
        raise FileNotFoundError(f"--map {map_path}: " + ("is a directory; give the occupancy map file (.map.npz)"
                                                         if map_path.is_dir() else "no such file"))
    occupancy = None if map_path is None or args.no_map else _occupancy(map_path)
    g = snap.graph
    order = np.argsort(-g.place_visits, kind="stable")[: args.thumbnails]
    thumbs = read_thumbnails(args.db, [int(g.place_ids[i]) for i in order])
    left_out = draw_memory(snap, args.out, occupancy=occupancy, thumbnails=thumbs)
    print(f"wrote {args.out} ({len(g.place_ids)} places, {len(thumbs)} keyframes"
          + (f", map {map_path}" if occupancy is not None else "")
          + (f"; labels left out: {', '.join(left_out)}" if left_out else "") + ")", file=sys.stderr)
    return 0


def _export(args: argparse.Namespace) -> int:
    import networkx as nx

    suffix = args.out.suffix.lower()
    if suffix not in EXPORT_FORMATS:
        raise ValueError(f"--out {args.out}: unknown format {suffix or '(no suffix)'}; use one of "
                         + ", ".join(EXPORT_FORMATS))
    if args.embeddings and suffix == ".graphml":
        raise ValueError("--embeddings needs --out *.json: GraphML attributes cannot hold lists")
    graph = to_networkx(read_snapshot(args.db), embeddings=args.embeddings)
    if suffix == ".graphml":
        data = io.BytesIO()
        nx.write_graphml(graph, data)
        text = data.getvalue()
    else:
        text = (json_text(nx.node_link_data(graph, edges="edges"), indent=None) + "\n").encode()
    replace_files({args.out: text})   # a failed write keeps the old file and leaves no temporary one
    print(f"wrote {args.out}: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges", file=sys.stderr)
    return 0


def _backup(args: argparse.Namespace) -> int:
    from memnav.core.files import replace_files
    from memnav.core.memory.store import backup_store, refuse_overwrite

    src_map = lifelong_map_path(args.db.parent, args.db.stem)
    dst_map = lifelong_map_path(args.out.parent, args.out.stem)
    copy_map = not args.no_map and src_map.is_file()
    refuse_overwrite(args.out, *([dst_map] if copy_map else []))   # before the database is copied
    result = backup_store(args.db, args.out)
    if copy_map:
        replace_files({dst_map: src_map.read_bytes()}, sync=True)   # maps are replaced whole, never half-written
    print(f"backed up {args.db} to {result.path}: {result.places} places, {result.objects} objects, "
          f"{result.edges} edges, {result.bytes / 2**20:.2f} MiB, integrity check ok"
          + (f"; map {dst_map}" if copy_map else ""), file=sys.stderr)
    return 0


def _refuse_writing_over(db: Path, out: Path | None, option: str) -> None:
    """These commands only read DB: an output path that is DB itself (or one of its SQLite side files) is refused
    before anything is written."""
    if out is None or out == STDOUT_ONLY:
        return
    if any(same_file(out, p) for p in (db, *(db.resolve().with_name(db.name + s) for s in ("-wal", "-shm",
                                                                                          "-journal")))):
        raise ValueError(f"{option} {out} is the memory database DB itself; this command only reads DB, "
                         "write the output to another file")


def _refuse_a_folder(out: Path | None, option: str) -> None:
    """An output path that is a folder is named before the memory is read (and before any summary is printed)."""
    if out is not None and out != STDOUT_ONLY and out.is_dir():
        raise ValueError(f"{option} {out}: is a directory; give a file path")


def run(args: argparse.Namespace) -> int:
    option = "OUT" if args.action == "backup" else "--out" if getattr(args, "out", None) is not None else "--json"
    out = getattr(args, "out", None) or getattr(args, "json", None)
    _refuse_writing_over(args.db, out, option)
    _refuse_a_folder(out, option)
    if args.action == "show" and args.map is not None and args.no_map:
        raise ValueError("--map and --no-map contradict each other: give one of them")
    return {"info": _info, "show": _show, "export": _export, "backup": _backup}[args.action](args)
