"""`memnav status --json`: what it writes (no ROS graph: a stand-in for its node)."""
import json
import time

from memnav.ros.status_command import report


class _Node:
    """What `report` reads of the status command's node."""

    class _Clock:
        class _Now:
            nanoseconds = 1_700_000_000 * 10**9

        def now(self):
            return self._Now()

    def get_namespace(self) -> str:
        return "/"

    def get_node_names_and_namespaces(self) -> list[tuple[str, str]]:
        return [("policy_node", "/")]

    def get_clock(self):
        return self._Clock()


def test_status_json_is_strict_json_when_a_node_reports_nan(tmp_path, capsys):
    """The nodes write their status messages with Python's json, which writes NaN; status copied it into --json,
    which strict readers (jq, JSON.parse) refuse."""
    out = tmp_path / "status.json"
    got = {"policy": (time.monotonic(), {"action": "MOVE_FORWARD", "belief": float("nan"), "stamp_ns": 1})}
    assert report(_Node(), got, {}, time.monotonic(), out) is True

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    body = json.loads(out.read_text(), parse_constant=refuse)
    assert body["policy_state"] == {"action": "MOVE_FORWARD", "belief": None, "stamp_ns": 1} and body["ok"] is True
    assert "belief nan" in capsys.readouterr().out   # the printed status says what came
