"""memnav.core.files.replace_files: all files replaced, or none; temporaries of killed writers cleared."""
import signal
import subprocess
import sys

import pytest

from memnav.core.files import replace_files, temporary_path


def test_files_are_replaced_together_and_a_failed_write_replaces_none(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "sub" / "b.txt"
    replace_files({a: b"one", b: b"two"}, sync=True)
    assert (a.read_bytes(), b.read_bytes()) == (b"one", b"two")
    (tmp_path / "blocker").write_text("a file where a folder would go")
    with pytest.raises(OSError):
        replace_files({a: b"new", tmp_path / "blocker" / "c.txt": b"x"})
    assert a.read_bytes() == b"one"                              # the first file was not replaced either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "blocker", "sub"]   # no temporary file left


def test_a_writer_killed_mid_write_leaves_no_temporary_after_the_next_write(tmp_path):
    a = tmp_path / "a.txt"
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        temporary_path(a, killed.pid).write_bytes(b"half of a file")    # what SIGKILL during a write leaves
        temporary_path(a, running.pid).write_bytes(b"being written")    # a writer still at work
        (tmp_path / ".b.txt.tmp1").write_bytes(b"another file's")       # not a.txt's: left alone
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        replace_files({a: b"whole"})
        assert a.read_bytes() == b"whole"
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            f".a.txt.tmp{running.pid}", ".b.txt.tmp1", "a.txt"]
    finally:
        running.kill()
        running.wait(timeout=30)
        killed.kill()


def test_json_safe_makes_strict_json_of_non_finite_and_numpy_values():
    import json
    import math

    import numpy as np

    from memnav.core.files import json_safe

    value = {"spl": float("nan"), "by_visit": [np.float32(0.5), math.inf, -math.inf], 3: np.int64(7),
             "ok": np.bool_(True), "pair": (1, np.float64("nan"))}
    with pytest.raises(ValueError):
        json.dumps(value, allow_nan=False, default=float)
    text = json.dumps(json_safe(value), allow_nan=False)
    assert json.loads(text) == {"spl": None, "by_visit": [0.5, None, None], "3": 7, "ok": True, "pair": [1, None]}
