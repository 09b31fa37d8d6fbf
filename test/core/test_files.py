"""memnav.core.files.replace_files: all files replaced, or none."""
import pytest

from memnav.core.files import replace_files


def test_files_are_replaced_together_and_a_failed_write_replaces_none(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "sub" / "b.txt"
    replace_files({a: b"one", b: b"two"}, sync=True)
    assert (a.read_bytes(), b.read_bytes()) == (b"one", b"two")
    (tmp_path / "blocker").write_text("a file where a folder would go")
    with pytest.raises(OSError):
        replace_files({a: b"new", tmp_path / "blocker" / "c.txt": b"x"})
    assert a.read_bytes() == b"one"                              # the first file was not replaced either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "blocker", "sub"]   # no temporary file left
