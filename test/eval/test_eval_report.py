"""The `memnav eval` report: its statistics on known inputs, its files, and `memnav eval-report` on a JSON."""
import json
import math

import numpy as np
import pytest

from memnav.cli import main
from memnav.eval.eval_report import (
    agents_of,
    by_distance,
    ended_by_counts,
    focus_agent,
    lifelong_clusters,
    mean_interval,
    paired_difference,
    path_groups,
    reliability,
    wilson_interval,
    write_eval_report,
)


def _episode(i, scene, success, spl, steps=50, ended_by="", belief=None, dist=3.0, goal_depth=None):
    return {"episode_id": str(i), "scene_id": f"data/{scene}.glb", "success": float(success), "spl": spl,
            "soft_spl": spl, "distance_to_goal_m": 0.5 if success else 4.0, "geodesic_distance_m": dist,
            "path_length_m": 5.0, "steps": steps, "status": "stopped" if belief is not None else "step_limit",
            "ended_by": ended_by, "stop_belief": belief, "goal_view_depth_m": goal_depth}


def test_wilson_and_mean_intervals():
    lo, hi = wilson_interval(8, 10)
    assert (lo, hi) == pytest.approx((0.4902, 0.9433), abs=1e-4)   # the textbook Wilson 95% interval
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    m, lo, hi = mean_interval([0.0, 1.0] * 50)
    assert m == 0.5 and hi - m == pytest.approx(m - lo) and hi - m == pytest.approx(1.96 * 0.5025 / 10, abs=1e-3)
    assert mean_interval([0.3]) == (0.3, 0.3, 0.3) and all(math.isnan(v) for v in mean_interval([]))


def test_paired_difference_sees_a_shift_and_refuses_unpaired_runs():
    rng = np.random.default_rng(0)
    b = rng.uniform(0, 1, 200)
    d, lo, hi = paired_difference(b + 0.1, b)
    assert (d, lo, hi) == pytest.approx((0.1, 0.1, 0.1))   # a constant shift: no spread at all
    d, lo, hi = paired_difference(b, b[::-1].copy())
    assert lo < 0 < hi and lo < d < hi
    with pytest.raises(ValueError, match="share episodes"):
        paired_difference([1.0, 0.0], [1.0])
    # episodes in clusters that move together (one house's lifelong visits): resampling the clusters gives
    # the honest, wider interval; per episode it would look far more certain than 4 clusters allow
    effect = np.repeat(rng.normal(0.0, 0.1, 4), 50)
    base = rng.uniform(0, 1, 200)
    houses = np.repeat(["h1", "h2", "h3", "h4"], 50).tolist()
    d1, lo1, hi1 = paired_difference(base + effect, base)
    d4, lo4, hi4 = paired_difference(base + effect, base, clusters=houses)
    assert d1 == d4 and hi4 - lo4 > 3 * (hi1 - lo1)
    with pytest.raises(ValueError, match="cluster labels"):
        paired_difference([1.0, 0.0], [1.0, 1.0], clusters=["h1"])


def test_reliability_bins_and_ece():
    rel = reliability([0.05, 0.15, 0.95, 0.95], [0, 0, 1, 0], bins=10)
    assert rel.counts.tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    assert rel.success_rate[9] == 0.5 and rel.mean_belief[9] == pytest.approx(0.95)
    # ECE: 1/4 x 0.05 + 1/4 x 0.15 + 2/4 x 0.45
    assert rel.ece == pytest.approx(0.25 * 0.05 + 0.25 * 0.15 + 0.5 * 0.45)
    rng = np.random.default_rng(1)
    p = rng.uniform(0, 1, 20000)
    assert reliability(p, rng.uniform(0, 1, p.size) < p).ece < 0.02   # calibrated by construction


def test_results_shapes_layers_and_distance_bins():
    eps = [_episode(0, "h1", 1, 0.9, ended_by="stop", belief=0.8, dist=1.0),
           _episode(1, "h1", 0, 0.0, ended_by="candidate", belief=0.7, dist=5.0),
           _episode(2, "h2", 1, 0.5, ended_by="stop", belief=0.9, dist=9.0)]
    single = {"agent": "memnav", "per_episode": eps}
    assert list(agents_of(single)) == ["memnav"]
    assert focus_agent(agents_of({"agents": {"gru": single, "memnav": single}})) == "memnav"
    with pytest.raises(ValueError, match="per_episode"):
        agents_of({"agents": {"gru": {"success": 1.0}}})
    with pytest.raises(ValueError, match="neither"):
        agents_of({"success": 1.0})
    assert ended_by_counts(eps) == {"stop": (2, 0), "candidate": (0, 1)}
    assert path_groups(eps) == {}   # no episode recorded its path by layer
    eps[0]["path_by_layer_m"], eps[0]["path_given_up_m"] = {"explore": 3.0, "candidate": 2.0}, {"candidate": 1.5}
    eps[2]["path_by_layer_m"], eps[2]["path_given_up_m"] = {"explore": 1.0, "approach": 4.0}, {}
    eps[1]["path_by_layer_m"], eps[1]["path_given_up_m"] = {"explore": 6.0, "look": 0.0}, {}
    groups = path_groups(eps)
    assert groups["successes"] == {"episodes": 2, "geodesic_m": 5.0,
                                   "layers": {"explore": (2.0, 0.0), "approach": (2.0, 0.0), "candidate": (1.0, 0.75)}}
    assert groups["failures"] == {"episodes": 1, "geodesic_m": 5.0, "layers": {"explore": (6.0, 0.0)}}
    rows = by_distance(eps)
    assert [r["episodes"] for r in rows] == [1, 0, 1, 0, 1] and rows[-1]["bin"] == ">= 8 m"
    assert rows[0]["success"] == 1.0 and rows[2]["success"] == 0.0 and math.isnan(rows[1]["spl"])
    # another distance: episodes without it are left out
    eps[0]["goal_view_depth_m"], eps[1]["goal_view_depth_m"] = 0.6, 2.5
    rows = by_distance(eps, (0.0, 1.0, math.inf), key="goal_view_depth_m")
    assert [(r["episodes"], r["success"]) for r in rows] == [(1, 1.0), (1, 0.0)]


def test_report_files_from_a_saved_compare_json(tmp_path, capsys):
    a = [_episode(i, f"h{i % 2}", i % 3 != 0, 0.6 if i % 3 else 0.0, ended_by="stop", belief=0.5 + i / 40,
                  goal_depth=0.5 + i / 4) for i in range(12)]
    for e in a:
        e["path_by_layer_m"], e["path_given_up_m"] = {"explore": 3.0, "candidate": 2.0}, {"candidate": 1.0}
    b = [dict(e, success=1.0, spl=0.9, ended_by="", stop_belief=None, status="stopped") for e in a]
    results = {"split": "val", "episodes": 12, "lifelong": True,
               "agents": {"memnav": {"per_episode": a, "lifelong_spl_by_visit": [0.3, 0.5, 0.6, 0.7, 0.7, 0.8]},
                          "oracle": {"per_episode": b}}}
    src = tmp_path / "run.json"
    src.write_text(json.dumps(results))
    out = tmp_path / "rep"
    assert main(["eval-report", str(src), "--out", str(out)]) == 0
    assert "report.html" in capsys.readouterr().out
    page = (out / "report.html").read_text()
    for png in ("summary.png", "by_distance.png", "by_goal_view.png", "ended_by.png", "path_by_layer.png",
                "lifelong.png", "stop_reliability.png"):
        assert (out / png).stat().st_size > 1000 and f"src='{png}'" in page
    assert "candidate 2.0 (1.0 given up)" in page   # the path figure's numbers, as a table
    assert not (out / "episodes.png").exists()   # paths come only from a live run
    # memnav's success 8/12 with its Wilson interval, and memnav minus oracle on the same episodes
    lo, hi = wilson_interval(8, 12)
    assert f"0.667 [{lo:.3f}, {hi:.3f}]" in page
    # a lifelong run: the interval resamples whole houses (their visits share a memory)
    d, lo, hi = paired_difference([e["spl"] for e in a], [0.9] * 12, clusters=[e["scene_id"] for e in a])
    assert f"{d:.3f} [{lo:.3f}, {hi:.3f}]" in page and "resamples whole houses" in page
    assert page.count("<tr><td>h") == 2   # one row per house
    # --lifelong-visits 3: the sequences of 3 visits are what shares a memory, and what is resampled
    results["agents"]["memnav"]["lifelong_visits"] = 3
    src.write_text(json.dumps(results))
    assert main(["eval-report", str(src), "--out", str(tmp_path / "seq")]) == 0
    page = (tmp_path / "seq" / "report.html").read_text()
    clusters = lifelong_clusters(a, 3)
    assert len(set(clusters)) == 4 and clusters[:4] == ["data/h0.glb#0", "data/h1.glb#0", "data/h0.glb#0",
                                                        "data/h1.glb#0"]
    d, lo, hi = paired_difference([e["spl"] for e in a], [0.9] * 12, clusters=clusters)
    assert f"{d:.3f} [{lo:.3f}, {hi:.3f}]" in page and "resamples whole sequences of 3 visits" in page
    # errors name what is wrong and write nothing
    assert main(["eval-report", str(src), "--out", str(tmp_path / "x"), "--focus", "gru"]) == 2
    assert "gru" in capsys.readouterr().err and not (tmp_path / "x").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["eval-report", str(bad), "--out", str(tmp_path / "y")]) == 2
    assert "JSON object" in capsys.readouterr().err
    # an episode without a number for success or SPL is named with its file; so is a folder given as a run
    broken = json.loads(src.read_text())   # a --compare run
    for run in broken["agents"].values():
        run["per_episode"][3]["spl"] = "abc"
    bad.write_text(json.dumps(broken))
    assert main(["eval-report", str(bad), "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "per_episode[3]" in err and "'spl'" in err
    assert main(["eval-report", str(tmp_path), "--out", str(tmp_path / "y")]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["eval-report", str(src), "--out", str(bad)]) == 2     # --out names a file
    assert "--out" in capsys.readouterr().err and not (tmp_path / "y").exists()


def test_write_eval_report_single_agent_without_beliefs(tmp_path):
    eps = [_episode(i, "h1", i % 2, 0.5 * (i % 2)) for i in range(4)]
    files = write_eval_report({"agent": "forward", "per_episode": eps}, tmp_path)
    names = sorted(f.name for f in files)
    assert names == ["by_distance.png", "report.html", "summary.png"]   # no layers, lifelong or beliefs to show
    assert "against each agent" not in (tmp_path / "report.html").read_text()


def test_two_runs_of_one_agent_are_compared_episode_by_episode(tmp_path, capsys, monkeypatch):
    base = [_episode(i, "h1", i % 2, 0.5 * (i % 2), ended_by="stop", belief=0.6) for i in range(10)]
    new = [dict(e, success=1.0, spl=0.7) for e in base]
    for name, eps in (("base", base), ("new", new)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"agent": "memnav", "split": "val", "per_episode": eps}))
    out = tmp_path / "ab"
    assert main(["eval-report", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "base against each agent" in page and "<td>new</td>" in page   # the first file is the focus
    d, lo, hi = paired_difference([e["spl"] for e in base], [0.7] * 10)
    assert f"{d:.3f} [{lo:.3f}, {hi:.3f}]" in page
    # names, and runs that cannot be compared
    assert main(["eval-report", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "--names", "a",
                 "--out", str(out)]) == 2
    assert "--names" in capsys.readouterr().err
    (tmp_path / "test.json").write_text(json.dumps({"agent": "memnav", "split": "test", "per_episode": base}))
    assert main(["eval-report", str(tmp_path / "base.json"), str(tmp_path / "test.json"), "--out", str(out)]) == 2
    assert "split" in capsys.readouterr().err
    # the dataset named relative to this directory in one run and absolute in the other is the same data
    monkeypatch.chdir(tmp_path)
    for name, data in (("rel", "data/houses"), ("abs", str(tmp_path / "data" / "houses")), ("other", "data/enc96")):
        (tmp_path / f"{name}.json").write_text(json.dumps({"agent": "memnav", "split": "val", "data": data,
                                                           "per_episode": base}))
    assert main(["eval-report", "rel.json", "abs.json", "--out", str(out)]) == 0
    assert main(["eval-report", "rel.json", "other.json", "--out", str(out)]) == 2
    assert "data 'data/enc96' differs" in capsys.readouterr().err
    # runs on other episodes are listed, not paired
    (tmp_path / "short.json").write_text(json.dumps({"agent": "memnav", "split": "val", "per_episode": base[:5]}))
    assert main(["eval-report", str(tmp_path / "base.json"), str(tmp_path / "short.json"), "--out", str(out)]) == 0
    assert "not paired: other episodes" in (out / "report.html").read_text()
    # the camera each run's robot had is at the head of the report; where the runs differ, run by run
    # and so are the models and the exploring options changed from their defaults
    for name, told, options in (("told", True, {}), ("untold", False, {"keep_unseen_obstacles": True,
                                                                      "map_range_m": 4.0})):
        (tmp_path / f"{name}.json").write_text(json.dumps({"agent": "memnav", "split": "val", "per_episode": base,
                                                           "camera_forward_m": 0.15, "camera_mount_told": told,
                                                           "hfov_deg": 90.0, "encoder": "models/encoder.pt",
                                                           "exploring_options": options}))
    assert main(["eval-report", "told.json", "untold.json", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "<td>camera_forward_m</td><td>0.15</td>" in page and "<td>hfov_deg</td><td>90.0</td>" in page
    assert "<td>camera_mount_told</td><td>told True; untold False</td>" in page
    assert "<td>encoder</td><td>models/encoder.pt</td>" in page
    assert ("<td>exploring_options</td><td>told defaults; untold keep_unseen_obstacles=True, map_range_m=4.0</td>"
            in page)
    # the settings it takes to run them again too, and each run's skipped episodes
    selection = {"episodes": 10, "episode_ids": None, "spread": True}
    off = {"episode_id": "9", "scene_id": "data/h2.glb", "reason": "off <floor>"}
    for name, steps, skipped in (("s100", 100, []), ("s200", 200, [off])):
        (tmp_path / f"{name}.json").write_text(json.dumps({"agent": "memnav", "split": "val", "per_episode": base,
                                                           "max_steps": steps, "seed": 0,
                                                           "episode_selection": selection,
                                                           "skipped_episodes": skipped}))
    assert main(["eval-report", "s100.json", "s200.json", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "<td>max_steps</td><td>s100 100; s200 200</td>" in page and "<td>seed</td><td>0</td>" in page
    assert "<td>episode_selection</td><td>episodes=10, episode_ids=None, spread=True</td>" in page
    assert "Skipped episodes (1)" in page and "<td>s200</td><td>9</td><td>h2</td><td>off &lt;floor&gt;</td>" in page
    assert "<td>s100</td><td>9</td>" not in page


def test_the_lifelong_figure_draws_each_episode_at_its_visit_of_its_sequence(monkeypatch, tmp_path):
    """--lifelong-visits 5 over 15 episodes per house: the faint per-episode marks at visits 1-5, as the curve
    (5 points, drawn joined: a running mean of 5 over 5 points would be one point)."""
    import memnav.eval.eval_report as er
    from memnav.core.types import EpisodeStatus
    from memnav.sim.metrics import EpisodeResult, lifelong_spl_by_visit

    results = [EpisodeResult(f"{h}_{i}", h, 1.0, 0.1 * (i % 5) + 0.5, 0.5, 0.5, 3, 3, 10, EpisodeStatus.STOPPED)
               for h in ("house_a", "house_b") for i in range(15)]
    agent = {"per_episode": [r.to_json() for r in results], "lifelong_spl_by_visit": lifelong_spl_by_visit(results, 5),
             "lifelong_visits": 5}
    figures = []
    monkeypatch.setattr(er, "_save", lambda fig, path: figures.append(fig))
    assert er.plot_lifelong({"memnav": agent}, tmp_path / "unused.png")
    lines = {line.get_label(): line for line in figures[0].axes[0].get_lines()}
    faint = [x for line in figures[0].axes[0].get_lines() if line.get_color() == "0.45" for x in line.get_xdata()]
    assert sorted(set(faint)) == [1, 2, 3, 4, 5] and len(faint) == 30
    assert list(lines["memnav"].get_xdata()) == [1, 2, 3, 4, 5]
    assert list(lines["memnav"].get_ydata()) == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9])


def _img_sources(page):
    import re

    return re.findall(r"<img src='([^']+)'", page)


def test_names_are_html_escaped_in_every_table(tmp_path, capsys):
    ep = dict(_episode("<script>x</script>", "da<ta>/h&1", 0, 0.0, ended_by="<i>l</i>"), status="<s>")
    results = {"split": "<split>", "agents": {"mem<b>nav&": {"per_episode": [ep]},
                                              "b'x\"": {"per_episode": [dict(ep, success=1.0, spl=0.5)]}}}
    src = tmp_path / "run.json"
    src.write_text(json.dumps(results))
    assert main(["eval-report", str(src), "--out", str(tmp_path / "rep")]) == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    for raw in ("<b>", "<script>", "<i>", "<s>", "<ta>", "&1", "<split>"):
        assert raw not in page, raw
    assert "<td>mem&lt;b&gt;nav&amp;</td>" in page and "<td>h&amp;1</td>" in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "&amp;lt;" not in page   # escaped once, not twice


@pytest.mark.parametrize("episodes", [[], [_episode(i, "h1", 0, 0.0) for i in range(5)]],
                         ids=["no episodes", "all failed"])
def test_a_report_names_only_figures_it_wrote(tmp_path, capsys, episodes):
    src = tmp_path / "run.json"
    src.write_text(json.dumps({"agent": "memnav", "per_episode": episodes}))
    out = tmp_path / "rep"
    assert main(["eval-report", str(src), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    sources = _img_sources(page)
    assert sources and all((out / s).is_file() for s in sources)
    assert f"({len(sources)} figures)" in capsys.readouterr().out
    assert "nan" not in page.lower().replace("memnav", "")


def test_results_of_an_older_version_without_soft_spl_or_steps(tmp_path, capsys):
    old = [{"episode_id": i, "scene_id": "data/h1.glb", "success": float(i % 2), "spl": 0.4 * (i % 2)}
           for i in range(4)]   # an integer id, no soft_spl, steps or distances
    src = tmp_path / "old.json"
    src.write_text(json.dumps({"agent": "memnav", "per_episode": old}))
    assert main(["eval-report", str(src), "--out", str(tmp_path / "rep")]) == 0, capsys.readouterr().err
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "0.500 [" in page and "n/a" in page   # success as before; SoftSPL and steps unknown
    assert "Skipped episodes" not in page and "max_steps" not in page   # keys it did not record are not shown
    missing = {"agent": "memnav", "per_episode": [{"success": 1.0, "spl": 0.5}]}
    src.write_text(json.dumps(missing))
    assert main(["eval-report", str(src), "--out", str(tmp_path / "rep2")]) == 2
    err = capsys.readouterr().err
    assert "per_episode[0]" in err and "'scene_id'" in err and not (tmp_path / "rep2").exists()


def test_a_failed_figure_write_keeps_the_previous_report_files(tmp_path, capsys, monkeypatch):
    import matplotlib.figure

    src = tmp_path / "run.json"
    src.write_text(json.dumps({"agent": "memnav", "per_episode": [_episode(i, "h1", i % 2, 0.5) for i in range(4)]}))
    out = tmp_path / "rep"
    assert main(["eval-report", str(src), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def half_written(self, fname, **kwargs):   # a full disk: part of the file, then an error
        (open(fname, "wb") if isinstance(fname, (str, type(out))) else fname).write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_written)
    assert main(["eval-report", str(src), "--out", str(out)]) == 2
    assert "no space left on device" in capsys.readouterr().err.lower()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before   # whole old files, no temporary ones


def test_an_eval_bag_figure_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    import matplotlib.figure

    from memnav.eval.eval_bag import EvalResult
    from memnav.eval.report import plot_latency, plot_over_time, plot_trajectory

    lat = {k: {"count": 0} for k in ("read_decode", "encode", "memory_insert", "retrieve", "stop", "total")}
    empty = EvalResult(metrics={"input": {"reference": "odometry"}, "latency_ms": lat, "stop": {}}, frames=[],
                       goals=[], places={}, edges=[], loop_closures=[], growth=[])
    for plot in (plot_trajectory, plot_over_time, plot_latency):   # a bag without frames: empty figures
        plot(empty, tmp_path / f"{plot.__name__}.png")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert all(b.startswith(b"\x89PNG") for b in before.values())

    def half_written(self, fname, **kwargs):
        (open(fname, "wb") if isinstance(fname, (str, type(tmp_path))) else fname).write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_written)
    with pytest.raises(OSError):
        plot_latency(empty, tmp_path / "plot_latency.png")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("results, message", [
    ({"agents": [{"per_episode": []}]}, "'agents' is a list"),
    ({"agents": {"memnav": 5}}, "agent 'memnav' has no 'per_episode' list"),
    ({"agent": ["memnav"], "per_episode": []}, "'agent' is ['memnav'], not an agent name"),
    ({"agent": "memnav", "per_episode": [], "skipped_episodes": {"0": "x"}},
     "agent 'memnav' 'skipped_episodes' is a dict, not a list"),
    ({"agent": "memnav", "per_episode": [], "skipped_episodes": [{"episode_id": "3"}]},
     "agent 'memnav' skipped_episodes[0] has no 'scene_id'")])
def test_results_of_another_shape_are_refused_by_name(tmp_path, capsys, results, message):
    (tmp_path / "run.json").write_text(json.dumps(results))
    assert main(["eval-report", str(tmp_path / "run.json"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_names_rename_the_agents_of_a_single_results_file(tmp_path, capsys):
    eps = [_episode(i, "h1", i % 2, 0.5 * (i % 2)) for i in range(4)]
    (tmp_path / "one.json").write_text(json.dumps({"agent": "memnav", "split": "val", "per_episode": eps}))
    (tmp_path / "two.json").write_text(json.dumps({"split": "val", "agents": {
        "random": {"per_episode": eps}, "memnav": {"per_episode": eps}}}))
    out = tmp_path / "out"
    assert main(["eval-report", str(tmp_path / "one.json"), "--names", "baseline", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "<h1>memnav eval: baseline</h1>" in page   # the name was ignored with one file
    assert main(["eval-report", str(tmp_path / "two.json"), "--names", "b", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "<h1>memnav eval: b:random, b:memnav</h1>" in page and "b:memnav against each agent" in page
    assert main(["eval-report", str(tmp_path / "one.json"), "--out", str(out)]) == 0   # without --names: as run
    assert "<h1>memnav eval: memnav</h1>" in (out / "report.html").read_text()


def _write_episode_list(path, keys):
    """An episode file (the memnav/Habitat JSON format) holding episodes of these (scene, id) keys, in order."""
    path.write_text(json.dumps({"episodes": [
        {"episode_id": i, "scene_id": scene, "start_position": [0.0, 0.0, 0.0], "start_rotation": [0.0, 0.0, 0.0, 1.0],
         "goals": [{"position": [1.0, 0.0, 0.0]}]} for scene, i in keys]}))


def test_a_skipped_episode_keeps_its_place_in_its_house_sequence_of_lifelong_visits(tmp_path, capsys):
    """--lifelong-visits 3 with a house's second episode skipped: the report counted a house's sequences over the
    episodes that were run, so every later episode of the house was labelled with the sequence before its own, and
    the bootstrap resampled mixed-up sequences. The run's episode list (read again from its data) gives each
    episode its place; without it, such a house is resampled whole and the report says so."""
    from memnav.sim.metrics import SkippedEpisode

    keys = [(f"data/h{h}.glb", f"h{h}_{i}") for h in (0, 1) for i in range(12)]
    data = tmp_path / "episodes.json"
    _write_episode_list(data, keys)
    gaps = {keys[1], keys[12 + 4]}   # h0's second episode, h1's fifth: places 1 and 4
    ran = [k for k in keys if k not in gaps]
    # SPL moves with the sequence an episode was run in (its memory); the other agent is flat
    seq = {k: (i % 12) // 3 for i, k in enumerate(keys)}
    a = [dict(_episode(i, "x", 1, 0.2 + 0.25 * seq[k] * (k[0] == "data/h0.glb")), scene_id=k[0], episode_id=k[1])
         for i, k in enumerate(ran)]
    b = [dict(e, success=1.0, spl=0.5) for e in a]
    skipped = [SkippedEpisode(i, s, f"episode {i} ({s}): the goal is unreachable from the start").to_json()
               for s, i in sorted(gaps)]
    results = {"split": "val", "data": str(data), "lifelong": True, "episodes": 24,
               "episode_selection": {"episodes": None, "episode_ids": None, "spread": False},
               "agents": {"memnav": {"per_episode": a, "skipped_episodes": skipped, "lifelong_visits": 3,
                                     "lifelong_spl_by_visit": [0.5, 0.5, 0.5]},
                          "oracle": {"per_episode": b, "skipped_episodes": skipped}}}
    src = tmp_path / "run.json"
    src.write_text(json.dumps(results))
    assert main(["eval-report", str(src), "--out", str(tmp_path / "rep")]) == 0, capsys.readouterr().err
    page = (tmp_path / "rep" / "report.html").read_text()
    clusters = [f"{k[0]}#{seq[k]}" for k in ran]   # each episode in the sequence it was run in
    counted = [f"{k[0]}#{j // 3}" for k, j in zip(ran, list(range(11)) * 2)]   # over the run episodes only
    right = paired_difference([e["spl"] for e in a], [0.5] * len(a), clusters=clusters)
    shifted = paired_difference([e["spl"] for e in a], [0.5] * len(a), clusters=counted)
    assert right[1:] != pytest.approx(shifted[1:])
    assert "{:.3f} [{:.3f}, {:.3f}]".format(*right) in page and "{:.3f} [{:.3f}, {:.3f}]".format(*shifted) not in page
    assert "resampled as whole houses" not in page
    from memnav.eval.eval_report import episode_list_order, house_slots

    order = episode_list_order(results)
    assert order == keys
    assert house_slots(a, skipped, order) == [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] + [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11]
    assert lifelong_clusters(a, 3, skipped, order) == clusters and lifelong_clusters(a, 3) == counted
    # the dataset gone: where the skipped episodes were is unknown, so their houses are resampled whole
    data.unlink()
    assert episode_list_order(results) is None
    whole = lifelong_clusters(a, 3, skipped)
    assert whole == [k[0] for k in ran]
    assert main(["eval-report", str(src), "--out", str(tmp_path / "rep")]) == 0, capsys.readouterr().err
    page = (tmp_path / "rep" / "report.html").read_text()
    d, lo, hi = paired_difference([e["spl"] for e in a], [0.5] * len(a), clusters=whole)
    assert f"{d:.3f} [{lo:.3f}, {hi:.3f}]" in page
    assert "h0, h1: resampled as whole houses, since episodes were skipped there" in page


def test_the_lifelong_figure_draws_an_episode_after_a_skipped_one_at_its_visit(monkeypatch, tmp_path):
    """--lifelong-visits 3, a house's second episode skipped: the third is its sequence's second visit (as
    lifelong_spl_by_visit counts it), not its third; the fourth starts the next sequence."""
    import memnav.eval.eval_report as er

    keys = [("data/h0.glb", f"e{i}") for i in range(6)]
    _write_episode_list(tmp_path / "episodes.json", keys)
    eps = [dict(_episode(i, "h0", 1, 0.5), episode_id=k[1]) for i, k in enumerate(keys) if i != 1]
    results = {"agent": "memnav", "split": "val", "data": str(tmp_path / "episodes.json"), "lifelong": True,
               "episode_selection": {"episodes": None, "episode_ids": None, "spread": False},
               "per_episode": eps, "lifelong_visits": 3, "lifelong_spl_by_visit": [0.5, 0.5, 0.5],
               "skipped_episodes": [{"episode_id": "e1", "scene_id": "data/h0.glb", "reason": "unreachable"}]}
    figures = {}
    monkeypatch.setattr(er, "_save", lambda fig, path: figures.update({path.name: fig}))
    er.write_eval_report(results, tmp_path / "rep")
    (faint,) = [line for line in figures["lifelong.png"].axes[0].get_lines() if line.get_color() == "0.45"]
    assert list(faint.get_xdata()) == [1, 2, 1, 2, 3]


def test_the_report_shows_the_run_settings_and_the_skipped_episodes_of_a_real_run(tmp_path, capsys):
    """`memnav eval --report` of a run with an unreachable goal: the settings it takes to run it again are at the
    report's head and the skipped episode is listed, with its reason, as left out of every mean."""
    import gzip

    from conftest import make_tiny_dataset

    houses = make_tiny_dataset(tmp_path / "houses", seed=5, test=6)
    with gzip.open(houses / "episodes" / "test.json.gz", "rt") as f:
        episodes = json.load(f)
    episodes["episodes"][1]["goals"][0]["position"][0] += 100.0   # out of the house: unreachable
    data = tmp_path / "edited.json.gz"
    with gzip.open(data, "wt") as f:
        json.dump(episodes, f)
    skipped_id = episodes["episodes"][1]["episode_id"]
    out = tmp_path / "rep"
    assert main(["eval", "--data", str(data), "--scenes-dir", str(houses / "scenes"), "--compare", "oracle,forward",
                 "--lifelong", "--lifelong-visits", "2", "--max-steps", "40", "--seed", "4", "--no-progress",
                 "--report", str(out)]) == 0
    capsys.readouterr()
    page = (out / "report.html").read_text()
    for row in ("<td>max_steps</td><td>40</td>", "<td>seed</td><td>4</td>",
                "<td>episode_selection</td><td>episodes=None, episode_ids=None, spread=False</td>",
                "<td>explore</td><td>True</td>", "<td>homing</td><td>True</td>", "<td>renderer</td><td>auto</td>",
                "<td>policy_dir</td><td>models</td>", f"<td>scenes_dir</td><td>{houses / 'scenes'}</td>",
                "<td>workers</td><td>1</td>", "<td>map_checks_in_background</td><td>False</td>"):
        assert row in page, row
    assert "memory_dir" not in page   # not given: not shown
    head, rest = page.split("<h2>Summary</h2>")
    assert "Skipped episodes (1)" in head and "left out of every mean" in head
    house = json.loads((out / "results.json").read_text())["agents"]["oracle"]["per_episode"][0]["scene_id"]
    assert (f"<td>every agent</td><td>{skipped_id}</td><td>{house.split('/')[-1].removesuffix('.glb')}</td>"
            "<td>episode " in head and "unreachable from the start" in head)
    assert "<td>oracle</td><td>5</td>" in rest   # the 5 episodes that were run
    # the house's sequences of 2 visits, with the skipped second episode holding its place
    from memnav.eval.eval_report import episode_list_order

    results = json.loads((out / "results.json").read_text())
    oracle = results["agents"]["oracle"]
    assert lifelong_clusters(oracle["per_episode"], 2, oracle["skipped_episodes"], episode_list_order(results)) \
        == [f"{house}#{k}" for k in (0, 1, 1, 2, 2)]


def test_a_run_with_a_relative_data_path_is_reported_from_another_directory(tmp_path, capsys, monkeypatch):
    """`memnav eval --data edited.json.gz` (relative) with --lifelong-visits and a skipped episode, reported by
    `memnav eval-report` from another directory: the relative path was tried from there only, so the run's episode
    list could not be read and the houses with skipped episodes were resampled whole. The results now record
    `data_absolute`; results without it (of an older version) are looked for from the results file's folder too;
    and a dataset that is truly gone is named, with each path tried, on the page and on stderr."""
    import gzip
    import shutil

    from conftest import make_tiny_dataset

    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    elsewhere.mkdir()
    houses = make_tiny_dataset(run_dir / "houses", seed=5, test=6)
    with gzip.open(houses / "episodes" / "test.json.gz", "rt") as f:
        episodes = json.load(f)
    episodes["episodes"][1]["goals"][0]["position"][0] += 100.0   # out of the house: unreachable, skipped
    with gzip.open(run_dir / "edited.json.gz", "wt") as f:
        json.dump(episodes, f)
    monkeypatch.chdir(run_dir)
    assert main(["eval", "--data", "edited.json.gz", "--scenes-dir", "houses/scenes", "--compare", "oracle,forward",
                 "--lifelong", "--lifelong-visits", "2", "--max-steps", "40", "--no-progress",
                 "--json", "run.json"]) == 0
    results = json.loads((run_dir / "run.json").read_text())
    assert len(results["agents"]["oracle"]["skipped_episodes"]) == 1
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()

    def report(name):
        assert main(["eval-report", str(run_dir / name), "--out", str(elsewhere / "rep")]) == 0
        return (elsewhere / "rep" / "report.html").read_text(), capsys.readouterr().err

    page, err = report("run.json")
    assert "oracle against each agent" in page   # the paired intervals, by sequence of 2 visits
    assert "resampled as whole houses" not in page and "warning" not in err
    assert (results["data"], results["data_absolute"]) == ("edited.json.gz", str(run_dir / "edited.json.gz"))
    # a results file without data_absolute: its relative data is found beside it
    (run_dir / "old.json").write_text(json.dumps({k: v for k, v in results.items() if k != "data_absolute"}))
    page, err = report("old.json")
    assert "resampled as whole houses" not in page and "warning" not in err
    # the dataset gone: the paths tried are named, and its house is resampled whole
    shutil.move(run_dir / "edited.json.gz", tmp_path / "moved.json.gz")
    page, err = report("run.json")
    tried = [str(run_dir / "edited.json.gz"), str(elsewhere / "edited.json.gz")]
    assert "resampled as whole houses" in page and all(path in page for path in tried)
    assert "could not be read again" in err and all(path in err for path in tried)


def test_merged_runs_keep_a_later_runs_dataset_path_and_say_why_a_mixed_selection_has_no_list():
    """Merging an older results file (no `data_absolute`) with a newer one lost the newer one's absolute dataset
    path; runs that chose different episodes were said to be "results of an older version"."""
    from memnav.eval.eval_report import episode_list, merge_runs

    def run(**extra):
        return {"split": "test", "data": "houses", "lifelong": False, "agents": {"memnav": {"per_episode": []}},
                **extra}

    merged = merge_runs([("old", run()), ("new", run(data_absolute="/data/houses",
                                                     episode_selection={"episodes": 5}))])
    assert merged["data_absolute"] == "/data/houses"
    assert "data_absolute" not in merge_runs([("a", run()), ("b", run())])
    merged = merge_runs([("a", run(episode_selection={"episodes": 5})), ("b", run(episode_selection={"episodes": 9}))])
    order, why = episode_list(merged)
    assert order is None and why.startswith("the runs chose different episodes"), why
