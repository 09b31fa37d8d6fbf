"""memnav.paths: where a lifelong run keeps an environment's memory, and which of them exist already; output
paths refused before any work is done for them."""
from pathlib import Path

import pytest

from memnav.paths import (
    check_output_dir,
    check_output_file,
    earlier_memories,
    lifelong_map_path,
    lifelong_memory_path,
)


def test_earlier_memories_are_those_with_a_database_already(tmp_path):
    assert lifelong_memory_path(tmp_path, "house_020") == tmp_path / "house_020.db"
    assert lifelong_map_path(tmp_path, "house_020") == tmp_path / "house_020.map.npz"
    lifelong_memory_path(tmp_path, "house_020").write_bytes(b"")
    assert earlier_memories(tmp_path, ["house_021", "house_020", "house_020"]) == ["house_020"]
    assert earlier_memories(tmp_path / "missing", ["house_020"]) == []
    assert earlier_memories(None, ["house_020"]) == []


needs_proc = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc (a folder no file can "
                                                                        "be created in, even by root)")


def test_an_output_file_is_refused_for_what_would_stop_its_write(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match=r"^--out .*: is a directory"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(ValueError, match=r"^--json .*a_file/r.json: .*a_file is a file, not a directory"):
        check_output_file(tmp_path / "a_file" / "r.json", "--json")
    check_output_file(tmp_path / "new" / "deeper" / "r.json", "--json")    # missing folders are made at write time
    check_output_file(tmp_path / "a_file", "--json")                       # an existing file is replaced
    check_output_file(None, "--json")
    check_output_file(Path("-"), "--json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]      # the checks leave nothing behind


@needs_proc
def test_an_output_whose_nearest_folder_takes_no_file_is_refused_before_any_work():
    with pytest.raises(ValueError, match=r"^--json /proc/memnav_nowhere/r.json: cannot write in /proc \("):
        check_output_file(Path("/proc/memnav_nowhere/r.json"), "--json")
    with pytest.raises(ValueError, match=r"^--out /proc/memnav_nowhere: cannot write in /proc \("):
        check_output_dir(Path("/proc/memnav_nowhere"), "--out")
    with pytest.raises(ValueError, match=r"^--out /proc/self/fdinfo: cannot write in /proc/self/fdinfo \("):
        check_output_dir(Path("/proc/self/fdinfo"), "--out")                # an existing folder: files go into it


@needs_proc
def test_eval_refuses_a_json_it_could_not_write_before_running_episodes(capsys):
    from memnav.cli import main

    rc = main(["eval", "--agent", "random", "--split", "val", "--episodes", "1", "--json",
               "/proc/memnav_nowhere/r.json", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "--json /proc/memnav_nowhere/r.json: cannot write in /proc" in err, err
    assert "SPL" not in err and "Traceback" not in err, err


def test_same_file_sees_one_file_under_two_names(tmp_path, monkeypatch):
    from memnav.paths import same_file

    a = tmp_path / "a.json"
    a.write_text("{}")
    (tmp_path / "hard.json").hardlink_to(a)
    monkeypatch.chdir(tmp_path)
    assert same_file(Path("a.json"), a)                      # relative and absolute
    assert same_file(tmp_path / "hard.json", a)              # a hard link
    assert same_file(tmp_path / "new.json", Path("new.json"))   # neither exists yet
    assert not same_file(tmp_path / "new.json", a)
