"""memnav.paths: where a lifelong run keeps an environment's memory, and which of them exist already."""
from memnav.paths import earlier_memories, lifelong_map_path, lifelong_memory_path


def test_earlier_memories_are_those_with_a_database_already(tmp_path):
    assert lifelong_memory_path(tmp_path, "house_020") == tmp_path / "house_020.db"
    assert lifelong_map_path(tmp_path, "house_020") == tmp_path / "house_020.map.npz"
    lifelong_memory_path(tmp_path, "house_020").write_bytes(b"")
    assert earlier_memories(tmp_path, ["house_021", "house_020", "house_020"]) == ["house_020"]
    assert earlier_memories(tmp_path / "missing", ["house_020"]) == []
    assert earlier_memories(None, ["house_020"]) == []
