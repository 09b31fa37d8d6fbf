"""`memnav bench memory --quick` through the real CLI: JSON keys and sane values."""
import json

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
