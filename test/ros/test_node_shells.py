"""The memory node's database parameter and ~/clear on a real robot's failure modes, as real processes.

db_path in use by another memory node, written by a newer memnav, or read-only: the node refuses to start in one
line naming the parameter, with exit status 2, and the file is left byte for byte as it was. A ~/clear that
cannot create the file again answers failure and the node goes on in RAM only instead of dying.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import close_ros_test, stop_processes, use_isolated_ros_domain  # noqa: E402

from memnav.core.memory import SceneGraphConfig, SceneGraphMemory  # noqa: E402
from memnav.ros.stack_node import CONFIG_ERROR_EXIT  # noqa: E402

pytestmark = pytest.mark.ros


@pytest.fixture
def ros_env(monkeypatch):
    return use_isolated_ros_domain(monkeypatch, 149)


def _memory_cmd(db: Path, *ros_args: str) -> list[str]:
    return [sys.executable, "-m", "memnav.ros.memory_node", "--ros-args", "-p", f"db_path:={db}", *ros_args]


def _refusal(cmd: list[str]) -> str:
    """The one stderr line of a memory node that must refuse to start (fails if it runs instead)."""
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=25)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the memory node started instead of refusing:\n{(err.stderr or b'')[-1500:]!r}")
    assert run.returncode == CONFIG_ERROR_EXIT, run.stderr[-2000:]
    assert "Traceback" not in run.stderr + run.stdout
    [line] = run.stderr.splitlines()
    assert line.startswith("[memory_node] error: bad configuration: parameter 'db_path' "), line
    return line


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stored_memory(path: Path) -> None:
    memory = SceneGraphMemory.from_config(SceneGraphConfig(db_path=str(path)))
    memory.close()


def _running_memory_node(db: Path, log: Path) -> subprocess.Popen:
    """A memory node on `db`, logging into `log`, once it has opened its database (its "N places" line)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(_memory_cmd(db), stdout=out, stderr=subprocess.STDOUT)
    end = time.monotonic() + 30
    while "places" not in log.read_text() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.2)
    if proc.poll() is not None or "places" not in log.read_text():
        stop_processes([proc])
        raise AssertionError(log.read_text())
    return proc


def test_a_database_another_memory_node_holds_is_refused(ros_env, tmp_path):
    """Two memory nodes on one file clashed on node ids: the second went on in RAM only from its first insert."""
    db = tmp_path / "house.db"
    log = tmp_path / "first.log"
    first = _running_memory_node(db, log)
    try:
        before = _digest(db)
        line = _refusal(_memory_cmd(db, "-r", "__node:=memory_node_b"))
        assert "in use by another memory node" in line
        assert first.poll() is None and _digest(db) == before
    finally:
        stop_processes([first])
    # once the first node has stopped, the file is free again
    stop_processes([_running_memory_node(db, log)])


def test_a_newer_schema_file_is_refused_naming_db_path_and_left_untouched(ros_env, tmp_path):
    db = tmp_path / "house.db"
    _stored_memory(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    before = _digest(db)
    line = _refusal(_memory_cmd(db))
    assert "schema_version 99 is newer than the supported version" in line
    assert _digest(db) == before and sorted(p.name for p in tmp_path.iterdir()) == ["house.db"]


def _unshare_user() -> list[str]:
    """A prefix that runs a command in a new user namespace, where root's files obey their permission bits (the
    tests run as root, for whom chmod 444 changes nothing)."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-U", "true"], capture_output=True).returncode != 0:
        pytest.skip("no unshare -U here")
    return [unshare, "-U"]


def test_a_read_only_database_is_refused_at_start(ros_env, tmp_path):
    """A read-only file started the node, which then lost every insert to RAM with one error line."""
    db = tmp_path / "house.db"
    _stored_memory(db)
    db.chmod(0o444)
    prefix = _unshare_user() if os.geteuid() == 0 else []
    if subprocess.run([*prefix, "sh", "-c", f"test -w '{db}'"]).returncode == 0:
        pytest.skip("the read-only file is writable to this user")
    before = _digest(db)
    line = _refusal([*prefix, *_memory_cmd(db)])
    assert "cannot be opened for writing (Permission denied)" in line
    assert _digest(db) == before and sorted(p.name for p in tmp_path.iterdir()) == ["house.db"]


def test_clear_that_cannot_create_the_database_again_answers_failure_and_goes_on_in_ram(ros_env, tmp_path):
    """The folder of db_path removed (a USB stick pulled), then ~/clear: the node died with a traceback."""
    from std_srvs.srv import Trigger

    folder = tmp_path / "stick"
    folder.mkdir()
    log = tmp_path / "memory.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(_memory_cmd(folder / "house.db"), stdout=out, stderr=subprocess.STDOUT)
    rclpy.init(domain_id=ros_env)
    node = rclpy.create_node("test_node_shells")

    def call(name: str):
        client = node.create_client(Trigger, f"/memory_node/{name}")
        assert client.wait_for_service(timeout_sec=30.0), log.read_text()
        future = client.call_async(Trigger.Request())
        end = time.monotonic() + 10.0
        while not future.done() and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.1)
        assert future.done(), f"/memory_node/{name} did not answer (exit {proc.poll()})\n{log.read_text()[-2000:]}"
        return future.result()

    try:
        call("save")   # the node is up
        shutil.rmtree(folder)
        cleared = call("clear")
        assert not cleared.success and "in RAM only" in cleared.message and "does not exist" in cleared.message
        saved = call("save")
        assert not saved.success and "no longer saved" in saved.message
        assert proc.poll() is None and "Traceback" not in log.read_text(), log.read_text()
    finally:
        close_ros_test(node, [proc])
