"""`memnav goal-audit`: a split's goal photos audited for look-alikes, and evaluation results split by them."""
import json

import pytest
from conftest import make_tiny_dataset

from memnav.cli import main
from memnav.eval.goal_audit import annotate_ratios, read_audit, split_results


def test_results_are_split_and_annotated_by_episode(tmp_path, capsys):
    audit_rows = [
        {"episode_id": "h_0", "scene": "h", "lookalike_ratio": 0.3, "ambiguous": True, "near_identical": True},
        {"episode_id": "h_1", "scene": "h", "lookalike_ratio": 0.9, "ambiguous": True, "near_identical": False},
        {"episode_id": "h_2", "scene": "h", "lookalike_ratio": 1.4, "ambiguous": False, "near_identical": False},
    ]
    path = tmp_path / "audit.json"
    path.write_text(json.dumps({"per_episode": audit_rows}))
    audit = read_audit(path)
    per = [{"episode_id": f"h_{i}", "scene_id": "scenes/h.glb", "success": s, "spl": s * 0.5}
           for i, s in enumerate((0.0, 1.0, 1.0))] + [{"episode_id": "x_0", "scene_id": "x.glb", "success": 1.0,
                                                        "spl": 1.0}]
    out = split_results(audit, {"agent": "memnav", "per_episode": per})
    assert out["matched_episodes"] == 3
    assert out["ambiguous"] == {"episodes": 2, "success": 0.5, "spl": 0.25}
    assert out["near_identical"] == {"episodes": 1, "success": 0.0, "spl": 0.0}
    assert out["unambiguous"] == {"episodes": 1, "success": 1.0, "spl": 0.5}
    assert annotate_ratios(per, audit) == 3
    assert [r.get("goal_lookalike_ratio") for r in per] == [0.3, 0.9, 1.4, None]
    with pytest.raises(ValueError, match="none of its episodes"):
        split_results(audit, {"agent": "memnav", "per_episode": per[3:]})
    with pytest.raises(ValueError, match="per_episode"):
        split_results(audit, {"agents": {}})
    bad = tmp_path / "bad.json"
    for doc in ({"episodes": 3}, {"per_episode": [{"episode_id": "h_0", "scene": "h"}]}):
        bad.write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="not a `memnav goal-audit --json` file"):
            read_audit(bad)
    with pytest.raises(FileNotFoundError, match="no such goal audit"):
        read_audit(tmp_path / "missing.json")
    # an audit file without its summary (written by a script, say) is still read: the summary is recounted
    capsys.readouterr()
    assert main(["goal-audit", "--audit", str(path)]) == 0
    assert "goal audit of 3 episodes: 2 ambiguous" in capsys.readouterr().out


def test_cli_audits_a_split_and_the_report_plots_results_by_it(tmp_path, capsys):
    data = make_tiny_dataset(tmp_path / "houses", houses=3, seed=2, test=2)
    audit, results, report = tmp_path / "audit.json", tmp_path / "eval.json", tmp_path / "report"
    coarse = ["--grid-m", "0.5", "--heading-deg", "30", "--candidates", "2"]
    assert main(["goal-audit", "--data", str(data), "--split", "test", *coarse, "--json", str(audit),
                 "--no-progress"]) == 0
    doc = json.loads(audit.read_text())
    assert doc["episodes"] == 2 and len(doc["per_episode"]) == 2 and doc["config"]["grid_m"] == 0.5
    for row in doc["per_episode"]:
        assert row["nudge_rms"] > 0 and row["goal_view_depth_m"] > 0
        if row["lookalike_ratio"] is not None:
            assert row["lookalike_geodesic_m"] > 1.0
            assert row["ambiguous"] == (row["lookalike_ratio"] <= 1.0)
    assert doc["ambiguous_episodes"] == sum(r["ambiguous"] for r in doc["per_episode"])
    assert main(["eval", "--agent", "forward", "--data", str(data), "--split", "test", "--max-steps", "10",
                 "--json", str(results), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["goal-audit", "--audit", str(audit), "--results", str(results)]) == 0
    table = capsys.readouterr().out
    assert "unambiguous" in table and "forward (2 episodes matched)" in table
    assert main(["eval-report", str(results), "--goal-audit", str(audit), "--out", str(report)]) == 0
    assert (report / "by_goal_ambiguity.png").stat().st_size > 0
    assert "by_goal_ambiguity.png" in (report / "report.html").read_text()
    # a results file of another dataset is refused by name, and so is a file that is not an audit
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"agent": "forward", "per_episode": [
        {"episode_id": "nope", "scene_id": "nope.glb", "success": 0.0, "spl": 0.0}]}))
    assert main(["goal-audit", "--audit", str(audit), "--results", str(other)]) == 2
    assert "none of its episodes" in capsys.readouterr().err
    assert main(["eval-report", str(results), "--goal-audit", str(results), "--out", str(report)]) == 2
    assert "not a `memnav goal-audit --json` file" in capsys.readouterr().err


@pytest.mark.parametrize("option,value", [("--grid-m", "0"), ("--heading-deg", "nan"), ("--candidates", "0"),
                                          ("--nudge-m", "-1")])
def test_a_bad_search_setting_is_refused_naming_its_option(tmp_path, capsys, option, value):
    assert main(["goal-audit", "--data", str(tmp_path / "unused"), option, value, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert option in err and "GoalAuditConfig" not in err


AUDIT_ROWS = [{"episode_id": "h_0", "scene": "h", "lookalike_ratio": 0.3, "ambiguous": True, "near_identical": True}]


@pytest.mark.parametrize("typed", [["--split", "val"], ["--split", "test"], ["--data", "elsewhere"],
                                   ["--scenes-dir", "scenes"], ["--episodes", "3"], ["--episode-ids", "h_0"],
                                   ["--spread"], ["--renderer", "bvh"], ["--grid-m", "0.5"], ["--heading-deg", "30"],
                                   ["--candidates", "2"], ["--nudge-m", "0.1"], ["--nudge-deg", "5"]])
def test_an_audit_file_refuses_the_search_options_typed(tmp_path, capsys, typed):
    """--split test is the default value, typed: refused all the same (what was typed counts, not the value)."""
    audit, out = tmp_path / "audit.json", tmp_path / "out.json"
    audit.write_text(json.dumps({"per_episode": AUDIT_ROWS}))
    assert main(["goal-audit", "--audit", str(audit), *typed, "--json", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (f"memnav goal-audit: error: {typed[0]}: has no effect with --audit {audit} "
                   "(the audit is read, not searched)\n")
    assert not out.exists()


def test_an_audit_file_is_read_with_the_options_that_matter_and_refused_before_it_is_read(tmp_path, capsys):
    audit, out = tmp_path / "audit.json", tmp_path / "out.json"
    audit.write_text(json.dumps({"per_episode": AUDIT_ROWS}))
    # --json and --no-progress are not search options: the audit is read and written out
    assert main(["goal-audit", "--audit", str(audit), "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["ambiguous_episodes"] == 1
    # several search options: all named, on one line; the check comes before the file is read
    missing = tmp_path / "missing.json"
    assert main(["goal-audit", "--audit", str(missing), "--grid-m", "0.5", "--split", "val"]) == 2
    err = capsys.readouterr().err
    assert err == (f"memnav goal-audit: error: --split, --grid-m: have no effect with --audit {missing} "
                   "(the audit is read, not searched)\n")


def _no_search(*args, **kwargs):
    raise AssertionError("the search ran before --results was checked")


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("[1, 2]", "not a `memnav eval --json` file of one agent"),
    ('{"agent": "x", "per_episode": [{"episode_id": "h_0", "scene_id": "h.glb"}]}',
     "episode 'h_0' has success None, not a number"),
])
def test_a_wrong_results_file_is_refused_before_the_search(tmp_path, capsys, monkeypatch, content, message):
    """A minutes-long search is not wasted on a --results file that cannot be split: it is named first."""
    import memnav.eval.goal_audit as goal_audit

    monkeypatch.setattr(goal_audit, "_episode_rows", _no_search)
    results, out = tmp_path / "eval.json", tmp_path / "audit.json"
    if content is not None:
        results.write_text(content)
    assert main(["goal-audit", "--data", str(tmp_path), "--results", str(results), "--json", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memnav goal-audit: error: --results {results}: ") and message in err
    assert not out.exists()


def test_json_that_is_the_results_file_is_refused_and_the_evaluation_kept(tmp_path, capsys):
    audit, results = tmp_path / "audit.json", tmp_path / "eval.json"
    audit.write_text(json.dumps({"per_episode": AUDIT_ROWS}))
    results.write_text(json.dumps({"agent": "x", "per_episode": [
        {"episode_id": "h_0", "scene_id": "scenes/h.glb", "success": 1.0, "spl": 0.5}]}))
    before = results.read_bytes()
    assert main(["goal-audit", "--audit", str(audit), "--results", str(results), "--json", str(results)]) == 2
    assert f"error: --json {results} is the --results file" in capsys.readouterr().err
    assert results.read_bytes() == before


def test_json_output_is_strict_and_labels_that_are_not_booleans_are_refused(tmp_path, capsys):
    audit, out = tmp_path / "audit.json", tmp_path / "out.json"
    # written by a script: Python's json writes NaN, which is not JSON
    audit.write_text(json.dumps({"per_episode": [dict(AUDIT_ROWS[0], lookalike_ratio=float("nan"))]}))
    assert main(["goal-audit", "--audit", str(audit), "--json", str(out)]) == 0

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    assert json.loads(out.read_text(), parse_constant=refuse)["per_episode"][0]["lookalike_ratio"] is None
    capsys.readouterr()
    assert main(["goal-audit", "--audit", str(audit), "--json"]) == 0
    assert json.loads(capsys.readouterr().out, parse_constant=refuse)["episodes"] == 1
    audit.write_text(json.dumps({"per_episode": [dict(AUDIT_ROWS[0], ambiguous="no")]}))
    assert main(["goal-audit", "--audit", str(audit)]) == 2
    err = capsys.readouterr().err
    assert "not a `memnav goal-audit --json` file" in err and "ambiguous is 'no'" in err and "Traceback" not in err
