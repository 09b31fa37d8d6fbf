"""`memnav bench memory --quick` through the real CLI: JSON keys and sane values."""
import json

import pytest

from memnav.cli import main


def test_bench_memory_quick_writes_json(tmp_path, capsys):
    out = tmp_path / "bench_memory.json"
    assert main(["bench", "memory", "--quick", "--db", str(tmp_path / "db"), "--json", str(out),
                 "--no-progress"]) == 0
    res = json.loads(out.read_text())
    printed = capsys.readouterr()
    assert json.loads(printed.out) == res and printed.err == ""     # --no-progress: no bars on stderr
    assert res["insert_ms_p50_1k"] > 0 and res["retrieve_ms_p50_1k"] > 0
    assert res["bytes_per_node"] > 0
    assert 0 < res["nodes_after_first_loop"] <= res["nodes_after_patrol"]


@pytest.mark.parametrize("size", ["inf", "1e400", "nan", "5", "2.5"])
def test_bench_memory_sizes_that_are_not_whole_counts_are_refused_by_name(size, capsys):
    """`--sizes inf` ended in an OverflowError traceback, `nan` in "cannot convert float NaN to integer"."""
    assert main(["bench", "memory", "--sizes", size, "--no-progress"]) == 2
    assert f"memnav bench: error: --sizes: {size!r} must be a whole number >= 10" in capsys.readouterr().err



@pytest.mark.parametrize("option, value, error", [
    ("--queries", "500", "--quick runs at most 50 queries, not --queries 500; drop --quick or give fewer"),
    ("--patrol-hours", "1", "--quick patrols at most 10 minutes, not --patrol-hours 1; drop --quick or give less"),
])
def test_bench_memory_quick_refuses_a_larger_run_than_it_makes(option, value, error, tmp_path, capsys):
    """`--quick --queries 500 --patrol-hours 1` ran 50 queries and a 10-minute patrol without a word (the JSON said
    `queries` 50), as if the options had not been given."""
    out = tmp_path / "bench_memory.json"
    assert main(["bench", "memory", "--quick", option, value, "--db", ":memory:", "--json", str(out),
                 "--no-progress"]) == 2
    assert f"memnav bench: error: {error}" in capsys.readouterr().err and not out.exists()


def test_bench_memory_quick_keeps_a_smaller_queries_and_patrol(capsys):
    assert main(["bench", "memory", "--quick", "--queries", "7", "--patrol-hours", "0.01", "--db", ":memory:",
                 "--no-progress"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["queries"] == 7 and res["sizes"] == [1000, 5000]
    assert res["patrol_hours"] < 10 / 60        # at least two loops of the route, fewer than --quick's 10 minutes
