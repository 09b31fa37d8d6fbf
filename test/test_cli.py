"""memnav/cli.py: the `bench` group's `--json` works with and without a PATH; `--version`."""
import json
from pathlib import Path

import pytest

from memnav.cli import BENCH_TARGETS, STDOUT_ONLY, build_parser, main


@pytest.mark.parametrize("target", sorted(BENCH_TARGETS))
def test_every_bench_accepts_json_with_and_without_path(target, tmp_path):
    parser = build_parser()
    args = parser.parse_args(["bench", target, "--json"])
    if getattr(args, "_import_error", None):
        pytest.skip(args._import_error)
    assert args.json == STDOUT_ONLY
    assert parser.parse_args(["bench", target, "--json", str(tmp_path / "x.json")]).json == tmp_path / "x.json"
    assert parser.parse_args(["bench", target]).json is None


def test_bench_json_without_path_prints_json_and_writes_no_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "memory", "--quick", "--db", str(tmp_path / "db"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["insert_ms_p50_1k"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]


def test_version_matches_the_installed_package_and_package_xml(capsys):
    import re
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    printed = capsys.readouterr().out.strip()
    assert printed == f"memnav {version('memnav')}"
    package_xml = (Path(__file__).resolve().parents[1] / "package.xml").read_text()
    assert f"<version>{version('memnav')}</version>" in package_xml
    assert re.fullmatch(r"memnav \d+\.\d+\.\d+", printed)
