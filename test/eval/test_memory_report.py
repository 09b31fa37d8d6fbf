"""`memnav memory info|show|export` on a real memory database (and an occupancy map), through the CLI."""
import json

import networkx as nx
import numpy as np
import pytest

from memnav.cli import main
from memnav.core.exploration import ExplorerConfig, OccupancyMap
from memnav.core.memory import ObjectDetection, SceneGraphConfig, SceneGraphMemory
from memnav.core.types import Pose2D

DIM = 16
S = 1_000_000_000


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "house_000.db"
    rng = np.random.default_rng(1)
    m = SceneGraphMemory(SceneGraphConfig(embedding_dim=DIM, consolidate_every=0, db_path=str(path)))
    for i in range(8):
        e = rng.standard_normal(DIM)
        objs = [ObjectDetection(2, (3.0, 0.5, 0.5), instance_id=1, label="sofa")] if i == 2 else []
        m.insert_observation(i * S, [1.2 * i, 0.3 * i, 0.0], e / np.linalg.norm(e),
                             thumbnail=np.full((16, 16, 3), 30 * i, np.uint8), objects=objs)
    m.close()
    return path


def test_info_prints_counts_and_writes_json(db, tmp_path, capsys):
    out = tmp_path / "info.json"
    assert main(["memory", "info", str(db), "--check", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "places   8" in text and "sofa 1" in text and "integrity check: ok" in text
    info = json.loads(out.read_text())
    assert info["places"] == 8 and info["objects"] == 1 and info["integrity_check"] == "ok"
    assert main(["memory", "info", str(db), "--json"]) == 0    # no PATH: JSON on stdout
    assert json.loads(capsys.readouterr().out)["edges"]["traversable"] == 7


def test_show_draws_places_over_the_map_beside_the_database(db, tmp_path, capsys):
    occ = OccupancyMap(ExplorerConfig(), Pose2D(0.0, 0.0, 0.0))
    depth = np.full((32, 32), 2.0, np.float32)
    for x in (0.0, 4.0, 8.0):
        occ.integrate(depth, Pose2D(x, 0.0, 0.0))
    occ.save(db.with_name("house_000.map.npz"))
    png = tmp_path / "fig" / "memory.png"
    assert main(["memory", "show", str(db), "--out", str(png), "--thumbnails", "3"]) == 0
    err = capsys.readouterr().err
    assert "3 keyframes" in err and "house_000.map.npz" in err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    plain = tmp_path / "plain.png"
    assert main(["memory", "show", str(db), "--out", str(plain), "--no-map", "--thumbnails", "0"]) == 0
    assert plain.stat().st_size > 5_000 and plain.read_bytes() != data


def test_export_graphml_and_json(db, tmp_path):
    gml, js = tmp_path / "g.graphml", tmp_path / "g.json"
    assert main(["memory", "export", str(db), "--out", str(gml)]) == 0
    g = nx.read_graphml(gml, node_type=int)
    layers = [d["layer"] for _, d in g.nodes(data=True)]
    assert layers.count("place") == 8 and layers.count("object") == 1
    assert main(["memory", "export", str(db), "--out", str(js), "--embeddings"]) == 0
    doc = json.loads(js.read_text())
    h = nx.node_link_graph(doc, edges="edges")
    assert h.number_of_edges() == g.number_of_edges()
    assert all(len(d["embedding"]) == DIM for _, d in h.nodes(data=True) if d["layer"] == "place")


@pytest.mark.parametrize("argv, message", [
    (["export", "{db}", "--out", "{tmp}/g.csv"], "unknown format .csv"),
    (["export", "{db}", "--out", "{tmp}/g.graphml", "--embeddings"], "GraphML attributes cannot hold lists"),
    (["show", "{db}", "--out", "{tmp}/m.jpg"], "name it .png"),
    (["show", "{db}", "--out", "{tmp}/m.png", "--thumbnails", "-1"], "--thumbnails must be >= 0"),
    (["show", "{db}", "--out", "{tmp}/m.png", "--map", "{tmp}/none.npz"], "none.npz: no such file"),
    (["show", "{db}", "--out", "{tmp}/m.png", "--map", "{tmp}"], "--map {tmp}: is a directory"),
    (["info", "{tmp}/none.db"], "none.db: no memory database here"),
])
def test_bad_input_exits_2_naming_what_was_wrong(db, tmp_path, capsys, argv, message):
    args = [a.format(db=db, tmp=tmp_path) for a in argv]
    assert main(["memory", *args]) == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err
    assert not (tmp_path / "g.csv").exists() and not (tmp_path / "m.png").exists()


def test_an_output_that_is_the_database_itself_is_refused_and_the_database_kept(db, tmp_path, capsys):
    copy = tmp_path / "mem.json"     # a database whose name has an export suffix
    copy.write_bytes(db.read_bytes())
    before = copy.read_bytes()
    assert main(["memory", "export", str(copy), "--out", str(copy)]) == 2
    assert "only reads DB" in capsys.readouterr().err
    assert main(["memory", "info", str(copy), "--json", str(copy)]) == 2
    assert copy.read_bytes() == before
    assert main(["memory", "show", str(db), "--out", str(tmp_path / "m.png"), "--map", str(db), "--no-map"]) == 2
    assert "contradict" in capsys.readouterr().err
    assert main(["memory", "info", str(tmp_path)]) == 2     # a directory, not a database file
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "Traceback" not in err


def test_backup_copies_the_database_and_its_map_and_never_overwrites(db, tmp_path, capsys):
    occ = OccupancyMap(ExplorerConfig(), Pose2D(0.0, 0.0, 0.0))
    occ.integrate(np.full((32, 32), 2.0, np.float32), Pose2D(0.0, 0.0, 0.0))
    occ.save(db.with_name("house_000.map.npz"))
    out = tmp_path / "backups" / "monday.db"
    assert main(["memory", "backup", str(db), str(out)]) == 0
    err = capsys.readouterr().err
    assert "8 places, 1 objects" in err and "integrity check ok" in err and "monday.map.npz" in err
    assert (tmp_path / "backups" / "monday.map.npz").read_bytes() == db.with_name("house_000.map.npz").read_bytes()
    info = tmp_path / "info.json"
    assert main(["memory", "info", str(out), "--check", "--json", str(info)]) == 0
    assert json.loads(info.read_text())["places"] == 8
    before = out.read_bytes()
    assert main(["memory", "backup", str(db), str(out)]) == 2          # OUT exists: refused, kept as it was
    assert "monday.db exists; a backup never overwrites a file" in capsys.readouterr().err
    assert out.read_bytes() == before
    lone = tmp_path / "lone.db"
    (tmp_path / "lone.map.npz").write_bytes(b"someone else's map")
    assert main(["memory", "backup", str(db), str(lone)]) == 2         # the map beside OUT exists: nothing copied
    assert "lone.map.npz exists" in capsys.readouterr().err and not lone.exists()
    assert main(["memory", "backup", str(db), str(lone), "--no-map"]) == 0
    assert (tmp_path / "lone.map.npz").read_bytes() == b"someone else's map"
    assert main(["memory", "backup", str(db), str(db)]) == 2
    assert "OUT" in capsys.readouterr().err


def _no_nan(text):
    """json.loads that refuses NaN / Infinity (Python writes them, but they are not JSON)."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_json_output_stays_valid_json_with_non_finite_values(db, tmp_path, capsys):
    import sqlite3

    with sqlite3.connect(db) as con:   # a damaged or foreign memory: a NaN embedding, a place at infinity
        con.execute("UPDATE places SET embedding = ? WHERE id = (SELECT min(id) FROM places)",
                    (np.full(DIM, np.nan, np.float32).tobytes(),))
        con.execute("UPDATE places SET x_m = ? WHERE id = (SELECT max(id) FROM places)", (float("inf"),))
    con.close()
    assert main(["memory", "info", str(db), "--json"]) == 0
    assert _no_nan(capsys.readouterr().out)["extent_m"]["x_max"] is None
    out = tmp_path / "info.json"
    assert main(["memory", "info", str(db), "--json", str(out)]) == 0
    assert _no_nan(out.read_text())["places"] == 8
    js = tmp_path / "g.json"
    assert main(["memory", "export", str(db), "--out", str(js), "--embeddings"]) == 0
    nodes = _no_nan(js.read_text())["nodes"]
    assert any(n.get("embedding", [0.0])[0] is None for n in nodes)
    assert any(n.get("x_m", 0.0) is None for n in nodes)


@pytest.mark.parametrize("action, name", [("export", "g.json"), ("show", "m.png"), ("info", "i.json")])
def test_an_output_path_that_is_a_folder_is_refused_before_anything_is_written(db, tmp_path, capsys, action,
                                                                              name):
    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    before = sorted(p.name for p in tmp_path.iterdir())
    option = "--json" if action == "info" else "--out"
    assert main(["memory", action, str(db), option, str(out / name)]) == 2
    captured = capsys.readouterr()
    assert f"{out / name}: is a directory" in captured.err
    assert ".tmp" not in captured.err and "Traceback" not in captured.err
    assert captured.out == ""          # no summary printed before the refusal
    assert sorted(p.name for p in tmp_path.iterdir()) == before and [p.name for p in out.iterdir()] == [name]


def test_a_failed_write_keeps_the_previous_figure_and_export(db, tmp_path, capsys, monkeypatch):
    import matplotlib.figure
    import networkx.readwrite.json_graph as jg

    png, js = tmp_path / "m.png", tmp_path / "g.json"
    assert main(["memory", "show", str(db), "--out", str(png), "--thumbnails", "0"]) == 0
    assert main(["memory", "export", str(db), "--out", str(js)]) == 0
    before = png.read_bytes(), js.read_bytes()

    def half_written(self, fname, **kwargs):   # a full disk: part of the file, then an error
        (open(fname, "wb") if isinstance(fname, (str, type(png))) else fname).write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_written)
    assert main(["memory", "show", str(db), "--out", str(png), "--thumbnails", "0"]) == 2
    assert "No space left on device".lower() in capsys.readouterr().err.lower()
    monkeypatch.setattr(jg, "node_link_data", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "disk full")))
    monkeypatch.setattr(nx, "node_link_data", jg.node_link_data)
    assert main(["memory", "export", str(db), "--out", str(js)]) == 2
    assert (png.read_bytes(), js.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json", "house_000.db", "m.png"]


def test_show_of_a_large_memory_leaves_out_the_labels_it_cannot_fit(db, tmp_path, capsys, monkeypatch):
    import sqlite3

    import matplotlib.axes

    rooms, objects = 400, 600
    with sqlite3.connect(db) as con:
        base = 10_000
        con.executemany("INSERT INTO rooms VALUES (?, ?, ?)", [(base + i, float(i), 0.0) for i in range(rooms)])
        con.executemany("INSERT INTO places (id, x_m, y_m, yaw_rad, first_seen_ns, last_seen_ns, visit_count, "
                        "room_id, embedding) VALUES (?, ?, ?, 0, 0, 0, 1, ?, ?)",
                        [(base + rooms + i, float(i % 40), float(i // 40), base + i % rooms,
                          np.zeros(DIM, np.float32).tobytes()) for i in range(2 * rooms)])
        con.executemany("INSERT INTO objects (id, class_id, instance_id, label, x_m, y_m, z_m, first_seen_ns, "
                        "last_seen_ns, observation_count) VALUES (?, 1, ?, 'chair', ?, ?, 0, 0, 0, 1)",
                        [(base + 3 * rooms + i, i, float(i % 30), float(i // 30)) for i in range(objects)])
        con.execute("UPDATE meta SET value = ? WHERE key = 'next_node_id'", (str(base + 3 * rooms + objects),))
    con.close()
    labels = []
    for name in ("text", "annotate"):
        original = getattr(matplotlib.axes.Axes, name)
        monkeypatch.setattr(matplotlib.axes.Axes, name,
                            lambda self, *a, _f=original, **k: labels.append(1) or _f(self, *a, **k))
    png = tmp_path / "big.png"
    assert main(["memory", "show", str(db), "--out", str(png), "--thumbnails", "2", "--no-map"]) == 0
    assert "labels left out" in capsys.readouterr().err
    assert len(labels) < 200 and png.stat().st_size > 5_000   # not one label per room and per object
