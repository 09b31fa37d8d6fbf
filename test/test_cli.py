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


def _help_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())   # argparse wraps lines


def test_help_shows_defaults_only_where_they_say_something(capsys):
    text = _help_of(["eval"], capsys)
    assert "(default: 500)" in text            # --max-steps: a real default is shown
    assert "(default: None)" not in text       # an option left out does what its help says
    text = _help_of(["memory", "show"], capsys)
    assert "(default: None)" not in text       # required --out and --map (help names its default)
    for argv in (["scenes"], ["goal-audit"], ["eval-report"], ["bench", "memory"], ["train", "stop"]):
        assert "(default: None)" not in _help_of(argv, capsys), argv


def test_a_path_of_the_wrong_kind_is_one_line_naming_it_not_a_traceback(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    # --out names a file where a folder of houses belongs
    assert main(["scenes", "--out", str(a_file / "sub"), "--houses", "1"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and str(a_file) in err and "Traceback" not in err
    assert a_file.read_text() == "x"


def test_a_missing_optional_simulator_is_a_clear_error(tmp_path, capsys):
    from conftest import make_tiny_dataset

    try:
        import habitat_sim  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("habitat-sim is installed here")
    data = make_tiny_dataset(tmp_path / "houses")
    assert main(["eval", "--agent", "forward", "--backend", "habitat", "--data", str(data), "--episodes", "1",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "habitat-sim is not installed" in err and "Traceback" not in err


def test_a_command_imports_only_its_own_module_so_it_starts_without_torch():
    import subprocess
    import sys

    probe = ("import sys; from memnav.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print('TORCH', 'torch' in sys.modules, 'memnav.eval.evaluate' in sys.modules)")
    for argv, torch_loaded in ((["--help"], False), (["estop", "--help"], False), (["goal", "send", "--help"], False),
                               (["eval", "--help"], True)):
        out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120).stdout
        assert f"TORCH {torch_loaded} {torch_loaded}" in out, (argv, out[-300:])


def test_the_options_of_the_named_command_are_parsed_and_the_others_listed():
    from memnav.cli import COMMANDS, _selected

    assert _selected(["bench", "encoder", "--json"]) == ("bench", "encoder")
    assert _selected(["goal", "send", "x.png"]) == ("goal",)
    assert _selected(["--help"]) == () and _selected([]) == ()
    assert _selected(["train"]) == ("train",)
    parser = build_parser(("goal",))
    args = parser.parse_args(["goal", "send", "x.png", "--wait"])
    assert args.wait and args.photos == [Path("x.png")]
    help_text = parser.format_help()
    assert all(name in help_text for name in COMMANDS)


def test_bench_parts_turn_ctrl_c_into_the_results_measured_so_far():
    from memnav.cli import BenchInterrupted, BenchParts

    results = {"seed": 0}
    with pytest.raises(BenchInterrupted) as stop:
        with BenchParts(results, ["size 1k", "size 10k", "patrol"]) as parts:
            parts.add("size 1k", {"insert_ms_p50_1k": 0.5})
            with pytest.raises(ValueError, match="'size 1k' is not one still to measure"):
                parts.add("size 1k", {})
            raise KeyboardInterrupt
    assert stop.value.results == {"seed": 0, "insert_ms_p50_1k": 0.5} and stop.value.results is results
    assert (stop.value.measured, stop.value.left_out) == (["size 1k"], ["size 10k", "patrol"])
    assert isinstance(stop.value, KeyboardInterrupt)    # what does not know BenchInterrupted still sees Ctrl-C
    with pytest.raises(RuntimeError):                   # other errors pass as they are
        with BenchParts({}, ["a"]):
            raise RuntimeError("no")


def test_bench_ctrl_c_prints_and_writes_the_parts_measured_and_exits_130(tmp_path, monkeypatch, capsys):
    """Ctrl-C during a bench lost everything it had measured (`memnav bench: interrupted`, status 130): now the parts
    finished before it are printed and written, marked interrupted, and stderr says what was left out."""
    from memnav.eval import bench_memory

    def patrol(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_memory, "bench_patrol", patrol)
    out = tmp_path / "memory.json"
    assert main(["bench", "memory", "--sizes", "10,20", "--queries", "3", "--db", ":memory:", "--json", str(out),
                 "--no-progress"]) == 130
    printed = capsys.readouterr()
    res = json.loads(out.read_text())
    assert json.loads(printed.out) == res
    assert res["interrupted"] is True and res["left_out"] == ["patrol"]
    assert res["insert_ms_p50_10"] > 0 and res["retrieve_ms_p50_20"] > 0 and res["bytes_per_node"] > 0
    assert "nodes_after_patrol" not in res and res["targets_met"] == {}   # no target of the sizes measured
    assert res["sizes"] == [10, 20] and res["queries"] == 3               # the run's settings, as a whole run's
    assert printed.err == ("memnav bench memory: interrupted: measured size 10, size 20, bytes_per_node; left out: "
                           'patrol; the results (marked "interrupted": true) hold only what was measured\n')


def test_bench_ctrl_c_before_anything_was_measured_writes_nothing(tmp_path, monkeypatch, capsys):
    from memnav.eval import bench_memory

    def size(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_memory, "bench_size", size)
    out = tmp_path / "memory.json"
    out.write_text("an earlier run's\n")
    assert main(["bench", "memory", "--sizes", "10", "--queries", "3", "--db", ":memory:", "--json", str(out),
                 "--no-progress"]) == 130
    printed = capsys.readouterr()
    assert printed.out == "" and out.read_text() == "an earlier run's\n"
    assert printed.err == "memnav bench memory: interrupted before anything was measured; nothing is written\n"


def test_bench_ctrl_c_in_its_clean_up_after_every_part_keeps_them_all(tmp_path, monkeypatch, capsys):
    """A Ctrl-C after a bench's last part, in its clean-up (removing its temporary databases), came as a plain
    KeyboardInterrupt: "interrupted before anything was measured; nothing is written", every result thrown away."""
    from memnav.eval import bench_memory

    work = tmp_path / "work"
    work.mkdir()

    real_rmtree = bench_memory.shutil.rmtree

    def rmtree(path, *args, **kwargs):   # the run's own folder, at the end; what its parts remove goes as usual
        if Path(path) == work:
            raise KeyboardInterrupt
        real_rmtree(path, *args, **kwargs)

    real_mkdtemp = bench_memory.tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):   # the run's own folder; a part's temporary ones as usual
        own = kwargs.get("prefix") == "memnav_bench_memory_"
        return str(work) if own else real_mkdtemp(*args, **kwargs)

    monkeypatch.setattr(bench_memory.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(bench_memory.shutil, "rmtree", rmtree)
    out = tmp_path / "memory.json"
    assert main(["bench", "memory", "--sizes", "10", "--queries", "3", "--patrol-hours", "0.01", "--json", str(out),
                 "--no-progress"]) == 130
    printed = capsys.readouterr()
    res = json.loads(out.read_text())
    assert json.loads(printed.out) == res and res["interrupted"] is True and res["left_out"] == []
    assert res["insert_ms_p50_10"] > 0 and res["nodes_after_patrol"] > 0
    assert printed.err.startswith("memnav bench memory: interrupted: measured size 10, bytes_per_node, patrol;")
