"""`memnav launch`: YAML launch files parsed, resolved and refused; nodes supervised as real processes."""
from __future__ import annotations

import argparse
import io
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import memnav
from memnav.cli import main
from memnav.ros import launch_command
from memnav.ros.launcher import (
    CONFIG_ERROR_EXIT,
    LaunchError,
    NodeFailure,
    NodeSpec,
    Output,
    RespawnLimit,
    Supervisor,
    build_command,
    child_environment,
    find_package_share,
    load_launch_file,
    locate_launch_file,
    parse_overrides,
    resolve_launch,
)

REPO = Path(memnav.__file__).resolve().parent.parent


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def executable(folder: Path, name: str, body: str, interpreter: str = "/bin/sh") -> Path:
    """A tiny program `name` in `folder` (found through exec_paths or PATH like a console script)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!{interpreter}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def plan_of(folder: Path, text: str, **overrides: str):
    return resolve_launch(load_launch_file(write(folder, "t.launch.yaml", text)), overrides)


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its parent to reap it is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] != "Z"


def wait_for(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------------------------------------------
# Parsing, substitutions, command lines


FULL = """\
    launch:
    - arg: {name: data, default: "$(find-pkg-share memnav)/data/houses", description: dataset folder}
    - arg: {name: mode, default: sim, choices: [sim, robot]}
    - arg: {name: robot}
    - set_env: {name: MEMNAV_TEST_MODE, value: "mode-$(var mode)"}
    - node:
        pkg: memnav
        exec: talker
        name: "$(var robot)_talker"
        namespace: "$(var robot)"
        args: "--fast 'two words'"
        output: screen
        respawn: "true"
        respawn_delay: 1.5
        on_exit: shutdown
        param:
        - from: PARAMS
        - {name: data, value: "$(var data)"}
        - {name: rate_hz, value: 2.0}
        - {name: lockstep, value: false}
        - {name: size_px, value: [64, 48]}
        - {name: note, value: ""}
        remap:
        - {from: /odom, to: "/$(var robot)/odom"}
        - {from: cmd_vel, to: nav/cmd_vel}
    """


def test_parses_and_resolves_every_supported_node_key(tmp_path):
    params = write(tmp_path, "params.yaml", "/**:\n  ros__parameters:\n    split: test\n")
    bin_dir = tmp_path / "bin"
    talker = executable(bin_dir, "talker", "exit 0\n")
    launch = load_launch_file(write(tmp_path, "t.launch.yaml", FULL.replace("PARAMS", str(params))))
    assert [(a.name, a.default, a.choices) for a in launch.args] == [
        ("data", "$(find-pkg-share memnav)/data/houses", ()), ("mode", "sim", ("sim", "robot")), ("robot", None, ())]
    assert launch.args[0].description == "dataset folder"

    plan = resolve_launch(launch, {"robot": "r2", "mode": "robot"})
    assert plan.args == {"data": f"{find_package_share('memnav')}/data/houses", "mode": "robot", "robot": "r2"}
    (node,) = plan.nodes
    assert (node.label, node.name, node.namespace, node.output) == ("r2_talker", "r2_talker", "/r2", Output.SCREEN)
    assert node.respawn and node.respawn_delay_s == 1.5 and node.shutdown_on_exit
    assert node.env == {"MEMNAV_TEST_MODE": "mode-robot"}
    assert build_command(node, exec_paths=[bin_dir]) == [
        str(talker), "--fast", "two words", "--ros-args",
        "-r", "__node:=r2_talker", "-r", "__ns:=/r2",
        "--params-file", str(params),
        "-p", f"data:={find_package_share('memnav')}/data/houses",
        "-p", "rate_hz:=2.0", "-p", "lockstep:=false", "-p", "size_px:=[64, 48]", "-p", "note:=''",
        "-r", "/odom:=/r2/odom", "-r", "cmd_vel:=nav/cmd_vel"]


def test_substitutions_var_env_and_find_pkg_share(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMNAV_TEST_HOME", "/home/x")
    monkeypatch.delenv("MEMNAV_TEST_UNSET", raising=False)
    plan = plan_of(tmp_path, """\
        launch:
        - arg: {name: a, default: "$(env MEMNAV_TEST_HOME)/y"}
        - arg: {name: b, default: "$(env MEMNAV_TEST_UNSET 'fallback value')"}
        - set_env: {name: MEMNAV_TEST_UNSET, value: "set by launch"}
        - arg: {name: c, default: "[$(env MEMNAV_TEST_UNSET)] $(var a)"}
        - arg: {name: share, default: "$(find-pkg-share memnav)"}
        """)
    assert plan.args["a"] == "/home/x/y"
    assert plan.args["b"] == "fallback value"
    assert plan.args["c"] == "[set by launch] /home/x/y"  # set_env is seen by later $(env ...)
    share = Path(plan.args["share"])
    assert (share / "package.xml").is_file()
    if not (Path(sys.prefix) / "share" / "memnav").is_dir():  # editable install: the repository root
        assert share == REPO

    with pytest.raises(LaunchError, match=r"MEMNAV_TEST_NOPE is not set"):
        plan_of(tmp_path, "launch:\n- arg: {name: a, default: $(env MEMNAV_TEST_NOPE)}\n")
    with pytest.raises(LaunchError, match=r"\$\(var later\) names no argument declared before it"):
        plan_of(tmp_path, "launch:\n- arg: {name: a, default: $(var later)}\n- arg: {name: later, default: x}\n")
    with pytest.raises(LaunchError, match=r"package 'no_such_pkg' not found"):
        plan_of(tmp_path, "launch:\n- arg: {name: a, default: $(find-pkg-share no_such_pkg)}\n")


def test_nested_substitutions_and_equals(tmp_path):
    """`$(equals A B)` compares as ROS 2 launch does (booleans by truth, numbers by value, else text) and takes
    nested substitutions as arguments, so one argument can switch a parameter or a node on."""
    plan = plan_of(tmp_path, """\
        launch:
        - arg: {name: origin, default: start}
        - arg: {name: folder, default: "a b"}
        - arg: {name: restarts, default: "$(equals $(var origin) start)"}
        - arg: {name: house, default: "$(equals $(var origin) house)"}
        - arg: {name: truth, default: "$(equals TRUE 1)"}
        - arg: {name: number, default: "$(equals 0.10 .1)"}
        - arg: {name: quoted, default: "$(equals '$(var folder)' \\"a b\\")"}
        - node: {exec: x, if: "$(equals $(var origin) start)", param: [{name: r, value: "$(var restarts)"}]}
        - node: {exec: y, unless: "$(equals $(var origin) start)"}
        """)
    assert (plan.args["restarts"], plan.args["house"]) == ("true", "false")
    assert (plan.args["truth"], plan.args["number"], plan.args["quoted"]) == ("true", "true", "true")
    assert [n.executable for n in plan.nodes] == ["x"]
    assert plan_of(tmp_path, "launch:\n- arg: {name: a, default: \"$(equals 1 2)\"}\n").args["a"] == "false"


@pytest.mark.parametrize("body, names", [
    ("- include: {file: other.launch.yaml}", ["unsupported action 'include'", "arg, group, node"]),
    ("- node: {exec: x, launch-prefix: gdb}", ["unsupported key(s) launch-prefix", "pkg, exec, name"]),
    ("- node: {exec: x, if: \"true\", unless: \"false\"}", ["launch[0].node", "`if` and `unless`"]),
    ("- group: {if: \"$(eval true)\", children: []}", ["unsupported substitution $(eval true)"]),
    ("- node: {exec: x, ros_args: --log-level debug}", ["ros_args"]),
    ("- node: {exec: x, on_exit: restart}", ["on_exit", "shutdown", "restart"]),
    ("- node: {exec: x, param: [{name: a, param: [{name: b, value: 1}]}]}", ["param[0]", "nested parameter"]),
    ("- node: {exec: x, param: [{name: a, value: {b: 1}}]}", ["param[0].value", "parameter file"]),
    ("- node: {exec: x, remap: [{from: a}]}", ["remap[0]", "missing required key(s) to"]),
    ("- node: {name: x}", ["launch[0].node", "missing required key(s) exec"]),
    ("- arg: {name: a, default: \"$(command ls)\"}", ["$(command ls)", "$(var NAME)", "$(find-pkg-share"]),
    ("- arg: {name: a, default: \"$(var\"}", ["unterminated substitution"]),
    ("- arg: {name: a, default: \"$(equals a)\"}", ["$(equals a) takes 2 argument(s)"]),
    ("- arg: {name: a, default: \"$(equals $(var b) 'c)\"}", ["unterminated quote"]),
    ("- arg: {name: a, default: \"$(var $(nope b))\"}", ["unsupported substitution $(nope b)"]),
    ("- set_env: {name: A}", ["set_env", "missing required key(s) value"]),
    ("- group: {scoped: true, forwarding: false, children: []}", ["forwarding", "children, scoped"]),
    ("- let: {name: a, value: b}", ["unsupported action 'let'"]),
])
def test_unsupported_content_is_refused_by_name(tmp_path, body, names):
    path = write(tmp_path, "bad.launch.yaml", f"launch:\n{body}\n")
    with pytest.raises(LaunchError) as err:
        load_launch_file(path)
    message = str(err.value)
    assert str(path) in message
    for name in names:
        assert name in message


def test_non_yaml_and_malformed_files_are_refused(tmp_path):
    with pytest.raises(LaunchError, match="only YAML launch files"):
        load_launch_file(write(tmp_path, "x.launch.py", "print()"))
    with pytest.raises(LaunchError, match="top-level key `launch:`"):
        load_launch_file(write(tmp_path, "x.launch.yaml", "nodes: []\n"))
    with pytest.raises(LaunchError, match="not valid YAML"):
        load_launch_file(write(tmp_path, "y.launch.yaml", "launch: [\n"))
    with pytest.raises(LaunchError, match="cannot read"):
        load_launch_file(tmp_path / "missing.launch.yaml")


def test_argument_overrides_and_their_errors(tmp_path):
    text = """\
        launch:
        - arg: {name: split, default: test, choices: [train, val, test]}
        - arg: {name: data}
        - group:
          - arg: {name: inner, default: "$(var split)-inner"}
        """
    plan = plan_of(tmp_path, text, data="d")
    assert plan.args == {"split": "test", "data": "d", "inner": "test-inner"}
    assert plan_of(tmp_path, text, data="d", split="val", inner="i").args == {"split": "val", "data": "d", "inner": "i"}
    with pytest.raises(LaunchError, match=r"argument\(s\) sploit; declared arguments: split, data, inner"):
        plan_of(tmp_path, text, data="d", sploit="val")
    with pytest.raises(LaunchError, match=r"'data' has no default and was not given; pass data:=VALUE"):
        plan_of(tmp_path, text)
    with pytest.raises(LaunchError, match=r"split:=all is not one of train, val, test"):
        plan_of(tmp_path, text, data="d", split="all")
    assert parse_overrides(["a:=1", "b:=x:=y", "c:="]) == {"a": "1", "b": "x:=y", "c": ""}
    with pytest.raises(LaunchError, match="expected NAME:=VALUE"):
        parse_overrides(["a=1"])


def test_choices_in_ros2_spelling_and_memnav_shorthand(tmp_path, capsys):
    """ROS 2's YAML frontend reads an arg's allowed values from `choice: [{value: a}, ...]` (and refuses other
    keys); memnav also reads its shorthand `choices: [a, ...]`. A value outside them is refused up front."""
    text = """\
        launch:
        - arg: {name: agent, default: memnav, choice: [{value: memnav}, {value: memnav-fixed}, {value: gru}]}
        - arg: {name: split, default: test, choices: [val, test]}
        - node: {exec: policy, param: [{name: agent, value: "$(var agent)"}]}
        """
    launch = load_launch_file(write(tmp_path, "t.launch.yaml", text))
    assert [a.choices for a in launch.args] == [("memnav", "memnav-fixed", "gru"), ("val", "test")]
    assert plan_of(tmp_path, text, agent="gru").nodes[0].params[0].value == "gru"
    with pytest.raises(LaunchError, match=r"launch argument agent:=foo is not one of memnav, memnav-fixed, gru"):
        plan_of(tmp_path, text, agent="foo")
    # through the command, before any node starts: one line, status 2
    assert main(["launch", str(tmp_path / "t.launch.yaml"), "agent:=foo"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "agent:=foo is not one of memnav, memnav-fixed, gru" in err

    for body, named in [
        ("{name: a, default: x, choice: [{value: y}]}", "arg.default: 'x' is not one of its choices y"),
        ("{name: a, choice: []}", "arg.choice: the list of allowed values is empty"),
        ("{name: a, choice: [y, z]}", "arg.choice: expected a list of `{value: VALUE}` mappings"),
        ("{name: a, choice: [{value: y}], choices: [y]}", "give `choice` or `choices`, not both"),
    ]:
        with pytest.raises(LaunchError, match=re.escape(named)):
            load_launch_file(write(tmp_path, "bad.launch.yaml", f"launch:\n- arg: {body}\n"))
    # a default built from substitutions is checked once resolved
    subst = "launch:\n- arg: {name: a, default: \"$(env MEMNAV_TEST_UNSET z)\", choice: [{value: y}]}\n"
    with pytest.raises(LaunchError, match=r"a:=z is not one of y"):
        plan_of(tmp_path, subst)


@pytest.mark.parametrize("tail", [
    ["--dry-run", "robot:=r2", "rate:=7"],
    ["robot:=r2", "rate:=7", "--dry-run"],
    ["robot:=r2", "--dry-run", "rate:=7"],
    ["robot:=r2", "--shutdown-timeout", "1", "rate:=7", "--dry-run"],
])
def test_options_and_launch_arguments_mix_in_any_order(tmp_path, capsys, monkeypatch, tail):
    """The README's `memnav launch launch/sim.launch.yaml --dry-run agent:=gru`: an option between FILE and the
    NAME:=VALUE items (or among them) is an option, through the whole `memnav` command line."""
    executable(tmp_path / "bin", "talker", "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    path = write(tmp_path, "t.launch.yaml", """\
        launch:
        - arg: {name: rate, default: "5"}
        - arg: {name: robot}
        - node: {exec: talker, namespace: $(var robot), param: [{name: rate_hz, value: $(var rate)}]}
        """)
    for argv in (["launch", str(path), *tail], ["launch", "--dry-run", str(path), *tail]):
        assert main(argv) == 0
        printed = capsys.readouterr().out.splitlines()
        assert printed == ["# talker (output=log)", f"{tmp_path / 'bin' / 'talker'} --ros-args -r __ns:=/r2 "
                           "-p rate_hz:=7"], argv
    with pytest.raises(SystemExit):
        main(["launch", str(path), "robot:=r2", "--no-such-option"])
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err
    assert main(["launch", str(path), "--dry-run", "robot=r2"]) == 2
    assert "launch argument 'robot=r2': expected NAME:=VALUE" in capsys.readouterr().err


def test_shipped_launch_files_declare_the_agents_the_policy_node_takes():
    from memnav.eval.learned_agents import LEARNED

    for name in ("sim.launch.yaml", "robot.launch.yaml"):
        (agent,) = [a for a in load_launch_file(REPO / "launch" / name).args if a.name == "agent"]
        assert set(agent.choices) == set(LEARNED) and agent.default in agent.choices, name


def test_groups_scope_env_and_namespaces(tmp_path):
    plan = plan_of(tmp_path, """\
        launch:
        - push-ros-namespace: {namespace: fleet}
        - group:
            children:
            - push_ros_namespace: {namespace: r1}
            - set_env: {name: SCOPED, value: "1"}
            - node: {exec: a, namespace: cam}
            - node: {exec: b, namespace: /abs}
        - node: {exec: c}
        - group:
            scoped: false
            children:
            - set_env: {name: LEAKS, value: "1"}
        - node: {exec: c, name: named}
        - node: {exec: c}
        """)
    got = [(n.label, n.namespace, dict(n.env)) for n in plan.nodes]
    assert got == [("a", "/fleet/r1/cam", {"SCOPED": "1"}), ("b", "/abs", {"SCOPED": "1"}), ("c", "/fleet", {}),
                   ("named", "/fleet", {"LEAKS": "1"}), ("c-2", "/fleet", {"LEAKS": "1"})]


def test_if_and_unless_conditions(tmp_path):
    text = """\
        launch:
        - arg: {name: fused, default: "false"}
        - arg: {name: extra, default: "0"}
        - arg: {name: mode, default: a, if: "$(var fused)"}
        - set_env: {name: FUSED_ONLY, value: "1", if: "$(var fused)"}
        - push_ros_namespace: {namespace: sep, unless: "$(var fused)"}
        - group:
            unless: "$(var fused)"
            children:
            - node: {exec: policy}
            - node: {exec: encoder, if: "$(var extra)"}
        - node: {exec: stack, if: "$(var fused)"}
        - node: {exec: always}
        """
    plan = plan_of(tmp_path, text)
    assert [(n.executable, n.namespace, dict(n.env)) for n in plan.nodes] == [
        ("policy", "/sep", {}), ("always", "/sep", {})]
    assert "mode" not in plan.args   # a declaration whose condition fails sets nothing
    assert [n.executable for n in plan_of(tmp_path, text, extra="1").nodes] == ["policy", "encoder", "always"]
    for true in ("true", "TRUE", " 1 "):
        plan = plan_of(tmp_path, text, fused=true)
        assert [(n.executable, n.namespace, dict(n.env)) for n in plan.nodes] == [
            ("stack", None, {"FUSED_ONLY": "1"}), ("always", None, {"FUSED_ONLY": "1"})]
        assert plan.args["mode"] == "a"
    # ROS 2 accepts only true/1/false/0 as a condition: anything else is an error naming the action
    flagged = "launch:\n- arg: {name: flag, default: x}\n- node: {exec: a, if: $(var flag)}\n"
    for bad in ("yes", "", "2"):
        with pytest.raises(LaunchError, match=r"launch\[1\]\.node: `if: \$\(var flag\)` resolved to .*true, 1, false"):
            plan_of(tmp_path, flagged, flag=bad)
    with pytest.raises(LaunchError, match=r"group: `unless: maybe` resolved to 'maybe'"):
        plan_of(tmp_path, "launch:\n- group: {unless: maybe, children: []}\n")
    with pytest.raises(LaunchError, match=r"\$\(var nope\) names no argument"):
        plan_of(tmp_path, "launch:\n- node: {exec: a, if: $(var nope)}\n")


def test_condition_and_substitution_errors_name_the_entry(tmp_path, monkeypatch):
    """In a file of several groups (one per robot), an `if:`/`unless:` that resolves to something else than
    true/1/false/0, or cannot be resolved, is named by the path of indices to its entry, as a node's errors are;
    so are an arg's, a set_env's and a push_ros_namespace's substitution errors."""
    robots = """\
        launch:
        - arg: {name: robot1, default: "true"}
        - arg: {name: robot2, default: "true"}
        - group:
            if: $(var robot1)
            children:
            - push_ros_namespace: {namespace: robot1}
            - node: {exec: policy}
        - group:
            if: $(var robot2)
            children:
            - push_ros_namespace: {namespace: robot2}
            - node: {exec: policy}
        """
    assert [n.namespace for n in plan_of(tmp_path, robots).nodes] == ["/robot1", "/robot2"]
    with pytest.raises(LaunchError) as err:
        plan_of(tmp_path, robots, robot2="maybe")
    assert str(err.value).startswith(f"{tmp_path / 't.launch.yaml'}: launch[3].group: `if: $(var robot2)` "
                                     "resolved to 'maybe'")
    with pytest.raises(LaunchError, match=r": launch\[2\]\.group: `if: \$\(var robot1\)` resolved to 'yes'"):
        plan_of(tmp_path, robots, robot1="yes")

    monkeypatch.delenv("MEMNAV_TEST_UNSET", raising=False)
    cases = [   # (body, message start after "FILE: ")
        ("- group: {if: $(var nope), children: []}", "launch[0].group.if: $(var nope) names no argument"),
        ("- group: [{node: {exec: a}}, {group: {unless: maybe, children: []}}]",
         "launch[0].group[1].group: `unless: maybe` resolved to 'maybe'"),
        ("- group: {children: [{node: {exec: a}}, {node: {exec: b, if: two}}]}",
         "launch[0].group.children[1].node: `if: two` resolved to 'two'"),
        ("- arg: {name: a, default: x}\n- arg: {name: b, default: y, unless: $(var a)}",
         "launch[1].arg: `unless: $(var a)` resolved to 'x'"),
        ("- set_env: {name: A, value: x, if: $(env MEMNAV_TEST_UNSET)}",
         "launch[0].set_env.if: environment variable MEMNAV_TEST_UNSET is not set"),
        ("- push_ros_namespace: {namespace: r, unless: \"\"}", "launch[0].push_ros_namespace: `unless: ` resolved"),
        ("- arg: {name: a, default: x}\n- arg: {name: b, default: $(var later)}",
         "launch[1].arg.default: $(var later) names no argument"),
        ("- arg: {name: a}", "launch[0].arg: launch argument 'a' has no default"),
        ("- group: [{arg: {name: a, default: x, choices: [y]}}]", "launch[0].group[0].arg.default: 'x' is not one"),
        ("- set_env: {name: A, value: $(var nope)}", "launch[0].set_env.value: $(var nope) names no argument"),
        ("- push_ros_namespace: {namespace: $(var nope)}",
         "launch[0].push_ros_namespace.namespace: $(var nope) names no argument"),
        ("- node: {exec: a, remap: [{from: a, to: b}, {from: c, to: $(var nope)}]}",
         "launch[0].node.remap[1].to: $(var nope) names no argument"),
        ("- node: {exec: a, param: [{name: p, value: $(var nope)}]}",
         "launch[0].node.param[0].value: $(var nope) names no argument"),
    ]
    for body, message in cases:
        with pytest.raises(LaunchError) as err:
            plan_of(tmp_path, f"launch:\n{body}\n")
        assert str(err.value).startswith(f"{tmp_path / 't.launch.yaml'}: {message}"), (body, str(err.value))
    with pytest.raises(LaunchError, match=r": launch\[1\]\.arg: launch argument a:=z is not one of x, y"):
        plan_of(tmp_path, "launch:\n- node: {exec: a}\n- arg: {name: a, default: x, choices: [x, y]}\n", a="z")


def test_command_line_errors_name_the_node(tmp_path):
    with pytest.raises(LaunchError, match=r"launch\[0\]\.node\.param\[0\]: parameter file not found: .*nope\.yaml"):
        plan_of(tmp_path, "launch:\n- node: {exec: a, param: [{from: nope.yaml}]}\n")
    with pytest.raises(LaunchError, match=r"output: expected one of screen, log, both, got 'loud'"):
        plan_of(tmp_path, "launch:\n- node: {exec: a, output: loud}\n")
    with pytest.raises(LaunchError, match=r"respawn: expected true or false"):
        plan_of(tmp_path, "launch:\n- node: {exec: a, respawn: sometimes}\n")
    (node,) = plan_of(tmp_path, "launch:\n- node: {exec: memnav_no_such_exec, pkg: memnav}\n").nodes
    with pytest.raises(LaunchError) as err:
        build_command(node, exec_paths=[tmp_path / "bin"])
    assert "memnav_no_such_exec" in str(err.value) and str(tmp_path / "bin") in str(err.value)
    assert str(Path(sys.executable).parent) in str(err.value)


def test_child_environment_strips_ros_wheel_bootstrap_for_foreign_interpreters(tmp_path):
    base = {"_ROS_WHEELS_BOOTSTRAP_COMPLETE": "1", "LD_LIBRARY_PATH": f"/opt/x:{Path(sys.prefix) / 'lib'}", "K": "v"}
    node = NodeSpec(label="n", executable="n", env={"K": "from set_env"})
    ours = child_environment(node, executable(tmp_path, "ours", "", interpreter=sys.executable), base)
    assert ours["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] == "1" and ours["LD_LIBRARY_PATH"] == base["LD_LIBRARY_PATH"]
    assert ours["K"] == "from set_env" and ours["PYTHONUNBUFFERED"] == "1"
    foreign = child_environment(node, executable(tmp_path, "foreign", "", interpreter="/bin/sh"), base)
    assert "_ROS_WHEELS_BOOTSTRAP_COMPLETE" not in foreign and foreign["LD_LIBRARY_PATH"] == "/opt/x"


def test_cli_show_args_and_dry_run(tmp_path, capsys, monkeypatch):
    executable(tmp_path / "bin", "talker", "exit 0\n")
    path = write(tmp_path, "t.launch.yaml", """\
        launch:
        - arg: {name: rate, default: "5", description: publishing rate in Hz}
        - arg: {name: robot, choices: [r1, r2]}
        - set_env: {name: MEMNAV_X, value: "a b"}
        - node: {exec: talker, name: talker, namespace: $(var robot), param: [{name: rate_hz, value: $(var rate)}]}
        """)
    parser = argparse.ArgumentParser()
    launch_command.add_arguments(parser)
    assert launch_command.run(parser.parse_args(["--show-args", str(path)])) == 0
    shown = capsys.readouterr().out
    assert "'rate':\n        publishing rate in Hz\n        (default: '5')" in shown
    assert "'robot':" in shown and "Valid choices are: r1, r2" in shown and "(required)" in shown

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert launch_command.run(parser.parse_args(["--dry-run", str(path), "robot:=r2", "rate:=7"])) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["# talker (output=log)", f"env 'MEMNAV_X=a b' {tmp_path / 'bin' / 'talker'} --ros-args "
                       "-r __node:=talker -r __ns:=/r2 -p rate_hz:=7"]
    with pytest.raises(LaunchError, match="declared arguments: rate, robot"):
        launch_command.run(parser.parse_args(["--dry-run", str(path), "robot:=r2", "speed:=1"]))
    assert locate_launch_file(str(path)) == path
    with pytest.raises(LaunchError, match=r"launch file not found: no_such\.launch\.yaml \(nor .*launch/no_such"):
        locate_launch_file("no_such.launch.yaml")


# --------------------------------------------------------------------------------------------------------------
# Supervision with real processes


def supervise(tmp_path: Path, text: str, timeout_s: float = 5.0, respawn_limit: RespawnLimit | None = None,
              **overrides: str):
    plan = plan_of(tmp_path, text, **overrides)
    out, log = io.StringIO(), io.StringIO()
    sup = Supervisor(plan.nodes, exec_paths=[tmp_path / "bin"], shutdown_timeout_s=timeout_s, out=out, log=log,
                     log_dir=tmp_path / "logs", respawn_limit=respawn_limit)
    start = time.monotonic()
    status = sup.run()
    return sup, status, out.getvalue(), log.getvalue(), time.monotonic() - start


def test_crash_is_reported_with_name_code_and_output(tmp_path):
    executable(tmp_path / "bin", "crasher", "echo 'loading map'\necho 'map has no floor' >&2\nexit 3\n")
    executable(tmp_path / "bin", "worker", "echo working\nsleep 0.5\n")
    sup, status, out, log, _ = supervise(tmp_path, """\
        launch:
        - node: {exec: crasher, name: planner, output: screen}
        - node: {exec: worker, output: log}
        """)
    assert status == 1
    assert sup.reports["planner"].crashed and sup.reports["planner"].returncode == 3
    assert not sup.reports["worker"].crashed and sup.reports["worker"].returncode == 0
    assert "[planner] loading map\n" in out and "[planner] map has no floor\n" in out
    assert "working" not in out  # output: log goes to the file only
    assert (tmp_path / "logs" / "worker.log").read_text() == "working\n"
    report = log[log.index("planner crashed"):]
    assert "exit code 3" in report and "[planner] loading map" in report and "[planner] map has no floor" in report


def test_on_exit_shutdown_ends_the_launch_and_escalates_to_sigkill(tmp_path):
    pids = tmp_path / "pids"
    executable(tmp_path / "bin", "stubborn", f"""\
        trap '' INT TERM
        sleep 600 &
        echo "$$ $!" > {pids}
        wait
        """)
    executable(tmp_path / "bin", "mission", f"while [ ! -s {pids} ]; do sleep 0.05; done\necho done\n")
    sup, status, out, log, elapsed = supervise(tmp_path, """\
        launch:
        - node: {exec: stubborn, output: screen}
        - node: {exec: mission, output: screen, on_exit: shutdown}
        """, timeout_s=0.3)
    assert status == 0 and "[mission] done" in out
    assert "mission has on_exit: shutdown" in log
    assert "sending SIGTERM" in log and "sending SIGKILL" in log  # SIGINT and SIGTERM are ignored
    parent, child = map(int, pids.read_text().split())
    assert not running(parent) and not running(child)
    assert sup.reports["stubborn"].returncode == -signal.SIGKILL
    assert elapsed < 4.0


def test_respawn_restarts_until_shutdown(tmp_path):
    # each run lasts longer than the quick-exit window, so the node is respawned every time
    executable(tmp_path / "bin", "flaky", "echo up\nsleep 0.2\nexit 1\n")
    executable(tmp_path / "bin", "timer", "sleep 1.5\n")
    sup, status, out, log, _ = supervise(tmp_path, """\
        launch:
        - node: {exec: flaky, output: screen, respawn: true, respawn_delay: 0.1}
        - node: {exec: timer, on_exit: shutdown, output: screen}
        """, respawn_limit=RespawnLimit(exits=2, within_s=0.1))
    flaky = sup.reports["flaky"]
    assert not flaky.crashed and flaky.failure is None  # a respawned node's exit is no crash ...
    assert 2 <= flaky.restarts <= 6, flaky.restarts  # ~1.5 s at one restart per 0.3 s
    assert flaky.restarts <= flaky.failed_runs <= flaky.starts
    assert status == 1  # ... but a failure all the same: the launch's status says so
    assert out.count("[flaky] up") == flaky.starts
    assert len(set(flaky.pids)) == flaky.starts
    assert log.count("flaky: exit code 1; respawning in 0.1 s") >= flaky.restarts
    # each respawn shows the last run's output only, not every earlier run's
    assert log.count("last 1 output line(s):\n    [flaky] up\n") >= flaky.restarts
    assert "last 2 output line(s)" not in log
    assert log.rstrip().splitlines()[-1] == f"[launch] exit status 1: flaky failed {flaky.failed_runs} time(s) and " \
                                           "was respawned"


REFUSER = """\
    import sys
    print("refuser: parameter rate_hz: expected a rate > 0 Hz, got -5.0", file=sys.stderr)
    sys.exit(2)
    """


def test_a_node_refusing_its_configuration_is_not_respawned_and_ends_the_launch(tmp_path, capsys, monkeypatch):
    """`memnav launch` as the user runs it: a respawn node exiting with CONFIG_ERROR_EXIT starts once, the other
    nodes are stopped, and the command exits 2 with a last line naming the node."""
    assert CONFIG_ERROR_EXIT == 2  # the nodes' convention (memnav.ros.stack_node)
    executable(tmp_path / "bin", "refuser", REFUSER, interpreter=sys.executable)
    executable(tmp_path / "bin", "worker", "echo working\nexec sleep 30\n")
    path = write(tmp_path, "t.launch.yaml", """\
        launch:
        - node: {exec: worker, output: screen}
        - node: {exec: refuser, name: safety_node, output: screen, respawn: true, respawn_delay: 0.0}
        """)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ROS_LOG_DIR", str(tmp_path / "logs"))
    start = time.monotonic()
    status = main(["launch", str(path), "--shutdown-timeout", "2"])
    elapsed = time.monotonic() - start
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert elapsed < 5.0
    assert captured.err.count("safety_node: started") == 1 and "respawning" not in captured.err
    assert captured.out.count("[safety_node] refuser: parameter rate_hz") == 1
    assert "safety_node refused its configuration (exit code 2" in captured.err
    assert "worker: stopped" in captured.err   # the rest of the launch is shut down, not left running
    last = captured.err.rstrip().splitlines()[-1]
    assert last.startswith("[launch] exit status 2: safety_node refused its configuration"), last


def test_a_refusal_ends_the_launch_whatever_its_on_exit(tmp_path):
    """Without respawn and without on_exit: shutdown the launch would carry on without the node (a sim run with
    no stop node, a lock-step bridge waiting forever for the policy); a refusal shuts it all down."""
    executable(tmp_path / "bin", "refuser", REFUSER, interpreter=sys.executable)
    executable(tmp_path / "bin", "bridge", "exec sleep 30\n")
    sup, status, out, log, elapsed = supervise(tmp_path, """\
        launch:
        - node: {exec: bridge, output: screen, on_exit: shutdown}
        - node: {exec: refuser, name: stop_node, output: log}
        """, timeout_s=2.0)
    assert status == 2 and elapsed < 5.0
    stop, bridge = sup.reports["stop_node"], sup.reports["bridge"]
    assert stop.failure is NodeFailure.REFUSED_CONFIG and stop.starts == 1 and stop.returncode == 2
    assert bridge.failure is None and bridge.returncode == -signal.SIGINT and not running(bridge.pids[0])
    # output: log: the node's own error line is shown with the refusal and its log file named in the summary
    assert "[stop_node] refuser: parameter rate_hz" in log[log.index("stop_node refused its configuration"):]
    assert log.rstrip().splitlines()[-1] == ("[launch] exit status 2: stop_node refused its configuration "
                                             f"(exit code 2; its error is in {tmp_path / 'logs' / 'stop_node.log'})")


def test_a_respawn_node_that_keeps_failing_at_start_is_given_up_on(tmp_path):
    runs = tmp_path / "runs"
    executable(tmp_path / "bin", "flaky", f"echo run >> {runs}\necho 'cannot open /dev/ttyUSB0'\nexit 1\n")
    executable(tmp_path / "bin", "worker", "exec sleep 30\n")
    sup, status, out, log, elapsed = supervise(tmp_path, """\
        launch:
        - node: {exec: flaky, output: screen, respawn: true, respawn_delay: 0.05}
        - node: {exec: worker, output: screen}
        """, timeout_s=2.0, respawn_limit=RespawnLimit(exits=3, within_s=5.0))
    flaky = sup.reports["flaky"]
    assert status == 1 and elapsed < 8.0
    assert flaky.starts == 3 == len(runs.read_text().split()) and flaky.failure is NodeFailure.GAVE_UP
    assert log.count("respawning in 0.05 s") == 2
    assert log.count("[launch] flaky: exit code 1; it exited within 5 s of its start 3 times in a row, giving up") == 1
    assert "last 2 output line(s)" not in log  # each report shows that run's line only
    assert sup.reports["worker"].returncode == -signal.SIGINT  # shut down, not left running
    assert log.rstrip().splitlines()[-1] == ("[launch] exit status 1: flaky was given up on: it exited within 5 s "
                                             "of its start 3 times in a row (last: exit code 1)")


def test_ctrl_c_after_a_node_failure_exits_non_zero(tmp_path):
    executable(tmp_path / "bin", "flaky", "sleep 0.3\nexit 1\n")
    executable(tmp_path / "bin", "worker", "exec sleep 30\n")
    plan = plan_of(tmp_path, """\
        launch:
        - node: {exec: flaky, respawn: true, respawn_delay: 0.0}
        - node: {exec: worker}
        """)
    log = io.StringIO()
    sup = Supervisor(plan.nodes, exec_paths=[tmp_path / "bin"], shutdown_timeout_s=2.0, out=io.StringIO(), log=log,
                     log_dir=tmp_path / "logs", respawn_limit=RespawnLimit(exits=3, within_s=0.1))
    # Ctrl-C once the node has failed (the launch runs until then: the worker sleeps 30 s)
    interrupt = threading.Thread(target=lambda: wait_for(lambda: sup.reports["flaky"].failed_runs >= 1)
                                 and os.kill(os.getpid(), signal.SIGINT))
    interrupt.start()
    status = sup.run()
    interrupt.join()
    assert sup.interrupted and status == 1, log.getvalue()
    assert sup.reports["flaky"].failure is None and "flaky failed" in log.getvalue().splitlines()[-1]


def test_ctrl_c_shuts_down_cleanly_through_the_cli(tmp_path):
    """`memnav launch` as the user runs it: PATH lookup, set_env, [name] output, Ctrl-C, no orphans."""
    pids = tmp_path / "pids"
    executable(tmp_path / "bin", "spawner", f"""\
        import os, pathlib, subprocess, time
        child = subprocess.Popen(["sleep", "600"])
        print("greeting", os.environ["MEMNAV_TEST_GREETING"])
        pathlib.Path("{pids}").write_text(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(600)
        """, interpreter=sys.executable)
    path = write(tmp_path, "t.launch.yaml", """\
        launch:
        - arg: {name: greeting, default: hi}
        - set_env: {name: MEMNAV_TEST_GREETING, value: "$(var greeting)"}
        - node: {exec: spawner, name: spawner, output: screen}
        """)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "ROS_LOG_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "memnav.cli", "launch", str(path), "greeting:=hello"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert wait_for(lambda: pids.exists() and pids.read_text().count(" ") == 1, 20), "spawner did not start"
        parent, child = map(int, pids.read_text().split())
        assert running(parent) and running(child)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the launcher's group only
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "[spawner] greeting hello" in out
    assert "SIGINT received, shutting down" in out and "SIGTERM" not in out  # ended by SIGINT, no escalation
    assert wait_for(lambda: not running(parent) and not running(child), 2)


def test_plan_refusals_and_rules_found_by_a_review(tmp_path):
    """Labels stay unique when a node's own name looks like another's suffixed label; respawn_delay must be a
    finite number; node names and namespaces rcl would refuse are refused before anything starts (exit 2, not
    every node crashing); a re-declared argument keeps the value it has (ROS 2: a default never overrides)."""
    plan = plan_of(tmp_path, """\
        launch:
        - node: {exec: sh, name: foo}
        - node: {exec: sh, name: foo}
        - node: {exec: foo-2}
        """)
    assert [n.label for n in plan.nodes] == ["foo", "foo-2", "foo-2-2"]   # an unnamed node goes by its executable
    for delay in (".nan", ".inf"):
        with pytest.raises(LaunchError, match="respawn_delay: expected a non-negative number of seconds"):
            plan_of(tmp_path, f"launch:\n- node: {{exec: sh, respawn: true, respawn_delay: {delay}}}\n")
    for body, named in (("- push_ros_namespace: {namespace: 1robot}\n- node: {exec: sh}", "namespace"),
                        ("- node: {exec: sh, namespace: robot-1}", "namespace"),
                        ("- node: {exec: sh, name: my node}", "name")):
        with pytest.raises(LaunchError, match=rf"node\.{named}:? .*ROS"):
            plan_of(tmp_path, "launch:\n" + body + "\n")
    assert plan_of(tmp_path, "launch:\n- node: {exec: sh, namespace: /}\n").nodes[0].namespace == "/"
    redeclared = """\
        launch:
        - arg: {name: mode, default: fast}
        - arg: {name: mode, default: slow}
        - node: {exec: sh, args: "--mode $(var mode)"}
        """
    assert plan_of(tmp_path, redeclared).nodes[0].args == ("--mode", "fast")
    assert plan_of(tmp_path, redeclared, mode="other").nodes[0].args == ("--mode", "other")
    # args: a substitution's value stays one argument, spaces and quotes and all (ROS 2's rule); literal text is
    # split by the shell's rules; a substitution alone that resolves to nothing adds no argument
    spaced = """\
        launch:
        - arg: {name: data, default: "/tmp/my maps"}
        - arg: {name: extra, default: ""}
        - node: {exec: sh, args: "--data $(var data) --name 'a $(var data)' $(var extra) --x=$(var extra)"}
        """
    assert plan_of(tmp_path, spaced).nodes[0].args == ("--data", "/tmp/my maps", "--name", "a /tmp/my maps", "--x=")
    assert plan_of(tmp_path, spaced, data="bob's maps").nodes[0].args[:2] == ("--data", "bob's maps")
    with pytest.raises(LaunchError, match=r"node\.args: No closing quotation"):
        plan_of(tmp_path, "launch:\n- node: {exec: sh, args: \"--name 'open\"}\n")


def test_a_crash_of_a_node_sharing_a_label_pattern_still_fails_the_launch(tmp_path):
    executable(tmp_path / "bin", "ok", "exit 0\n")
    executable(tmp_path / "bin", "bad", "exit 7\n")
    executable(tmp_path / "bin", "foo-2", "sleep 0.5\nexit 0\n")
    sup, status, _, log, _ = supervise(tmp_path, """\
        launch:
        - node: {exec: ok, name: foo}
        - node: {exec: bad, name: foo}
        - node: {exec: foo-2}
        """)
    assert status == 1 and sup.reports["foo-2"].returncode == 7, log


def test_no_respawn_after_ctrl_c_and_a_second_ctrl_c_skips_every_wait(tmp_path):
    """A node due for a respawn is not restarted once Ctrl-C came; a second Ctrl-C during the shutdown skips
    the SIGTERM wait too, not only the SIGINT one (a node deaf to both is killed at once)."""
    executable(tmp_path / "bin", "flaky", "echo run\nexit 1\n")
    executable(tmp_path / "bin", "deaf", "trap '' INT TERM\nwhile true; do sleep 0.1; done\n")
    plan = plan_of(tmp_path, """\
        launch:
        - node: {exec: flaky, respawn: true, respawn_delay: 0.5, output: screen}
        - node: {exec: deaf}
        """)
    log = io.StringIO()
    sup = Supervisor(plan.nodes, exec_paths=[tmp_path / "bin"], shutdown_timeout_s=30.0, out=io.StringIO(), log=log,
                     log_dir=tmp_path / "logs", respawn_limit=RespawnLimit(exits=100, within_s=0.01))

    def ctrl_c_twice():
        # the first while flaky waits out its respawn delay, the second once the shutdown has begun
        wait_for(lambda: "respawning in" in log.getvalue())
        sup._events.put(("signal", signal.SIGINT))
        wait_for(lambda: "SIGINT received, shutting down" in log.getvalue())
        time.sleep(0.5)
        sup._events.put(("signal", signal.SIGINT))

    thread = threading.Thread(target=ctrl_c_twice)
    thread.start()
    start = time.monotonic()
    sup.run()
    thread.join()
    took = time.monotonic() - start
    text = log.getvalue()
    assert text.count("flaky: started") == 1, text     # the due respawn never came
    assert "received again, not waiting" in text and "sending SIGKILL" in text, text
    assert took < 15.0, (took, text)                   # 30 s SIGINT and 30 s SIGTERM waits skipped


def test_sighup_from_a_closed_terminal_stops_the_nodes(tmp_path):
    """The nodes run in sessions of their own, so a terminal's hangup reaches the launcher alone: it shuts them
    down instead of dying and leaving them running."""
    pids = tmp_path / "pid"
    executable(tmp_path / "bin", "worker", f"echo $$ > {pids}\nexec sleep 120\n")
    path = write(tmp_path, "t.launch.yaml", "launch:\n- node: {exec: worker, output: screen}\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "ROS_LOG_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "memnav.cli", "launch", str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert wait_for(lambda: pids.exists() and pids.read_text().strip().isdigit(), 20), "worker did not start"
        worker = int(pids.read_text())
        os.kill(proc.pid, signal.SIGHUP)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "SIGHUP received, shutting down" in out, out
    assert wait_for(lambda: not running(worker), 5), "the node outlived its launcher"


def test_the_nodes_end_when_the_launcher_itself_is_killed(tmp_path):
    """A launcher that dies without shutting down (SIGKILL, out of memory, a crash) leaves no node running: each
    gets SIGTERM from the kernel, though it runs in a session of its own."""
    pids = tmp_path / "pid"
    executable(tmp_path / "bin", "worker", f"echo $$ > {pids}\nexec sleep 120\n")
    path = write(tmp_path, "t.launch.yaml", "launch:\n- node: {exec: worker, output: screen}\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "ROS_LOG_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "memnav.cli", "launch", str(path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: pids.exists() and pids.read_text().strip().isdigit(), 20), "worker did not start"
        worker = int(pids.read_text())
        proc.kill()
        proc.wait(timeout=10)
        ended = wait_for(lambda: not running(worker), 5)
    finally:
        if proc.poll() is None:
            proc.kill()
    if not ended:
        os.kill(worker, signal.SIGKILL)
    assert ended, "the node outlived its SIGKILLed launcher"


def test_a_closed_screen_neither_kills_the_nodes_nor_cuts_their_log_files(tmp_path):
    """`memnav launch FILE | head`: once the screen's reader is gone the nodes keep running (a Python node would
    die of a broken pipe if its output stopped being read), their log files keep every line, and Ctrl-C still
    ends the launch cleanly."""
    executable(tmp_path / "bin", "chatty", """\
        import time
        i = 0
        try:
            while True:
                print("line", i, flush=True)
                i += 1
                time.sleep(0.01)
        except KeyboardInterrupt:
            print("clean stop", flush=True)
        """, interpreter=sys.executable)
    path = write(tmp_path, "t.launch.yaml", "launch:\n- node: {exec: chatty, output: both}\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "ROS_LOG_DIR": str(tmp_path / "logs")}
    messages = tmp_path / "messages"
    with open(messages, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "memnav.cli", "launch", str(path)], env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith("[chatty] line 0"), messages.read_text()
        proc.stdout.close()   # what `| head -1` does once it has its line
        def logged() -> int:
            return sum(len(f.read_text().splitlines()) for f in (tmp_path / "logs").glob("*/chatty.log"))

        assert wait_for(lambda: logged() > 200, 20), messages.read_text()
        assert proc.poll() is None, messages.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=15) == 0, messages.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = messages.read_text()
    assert "the screen output was closed" in text and "crashed" not in text and "Traceback" not in text, text
    (log,) = (tmp_path / "logs").glob("*/chatty.log")
    lines = log.read_text().splitlines()
    assert lines[-1] == "clean stop", lines[-3:]
    assert lines[:-1] == [f"line {i}" for i in range(len(lines) - 1)] and len(lines) > 200


def test_an_unwritable_log_folder_is_an_error_naming_it(tmp_path, monkeypatch, capsys):
    """ROS_LOG_DIR naming a file (or a folder without write access): the error names the node, the log file and
    the way out; the nodes started before it are stopped."""
    pids = tmp_path / "pid"
    executable(tmp_path / "bin", "worker", f"echo $$ > {pids}\nexec sleep 120\n")
    executable(tmp_path / "bin", "quiet", "exec sleep 120\n")
    path = write(tmp_path, "t.launch.yaml", """\
        launch:
        - node: {exec: worker, output: screen}
        - node: {exec: quiet, name: mapper}
        """)
    (tmp_path / "not_a_folder").write_text("")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ROS_LOG_DIR", str(tmp_path / "not_a_folder"))
    assert main(["launch", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"launch\[1\]\.node: cannot write the log file of mapper \(log output\) at "
                     rf"{re.escape(str(tmp_path / 'not_a_folder'))}/\S+/mapper\.log: Not a directory; set ROS_LOG_DIR",
                     err), err
    assert wait_for(lambda: not running(int(pids.read_text())), 5), "the node started before it was left running"


# --------------------------------------------------------------------------------------------------------------
# The real sim_bridge_node


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    pytest.importorskip("rclpy")
    from conftest import make_tiny_dataset

    return make_tiny_dataset(tmp_path_factory.mktemp("launch") / "houses", houses=2, seed=4, val=0, test=1)


BRIDGE = """\
    launch:
    - arg: {name: data}
    - arg: {name: domain}
    - set_env: {name: ROS_DOMAIN_ID, value: "$(var domain)"}
    - set_env: {name: ROS_AUTOMATIC_DISCOVERY_RANGE, value: LOCALHOST}
    - node:
        pkg: memnav
        exec: sim_bridge_node
        name: bridge
        namespace: sim
        output: screen
        param:
        - from: PARAMS
        - {name: data, value: "$(var data)"}
        remap:
        - {from: /odom, to: /sim/odom}
    """


@pytest.mark.ros
@pytest.mark.slow
def test_launches_the_real_sim_bridge_node(tmp_path, tiny_data, monkeypatch):
    rclpy = pytest.importorskip("rclpy")
    params = write(tmp_path, "params.yaml", "/**:\n  ros__parameters:\n    split: test\n    lockstep: true\n")
    path = write(tmp_path, "bridge.launch.yaml", BRIDGE.replace("PARAMS", str(params)))
    domain = 40 + (os.getpid() + 77) % 150
    # The launcher itself is on another domain: the node is found on `domain` only through set_env.
    env = {**os.environ, "ROS_DOMAIN_ID": str((domain + 1) % 230), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

    # A bad dataset: the node refuses its configuration (CONFIG_ERROR_EXIT) with its own one-line error, and the
    # launch reports it by name and exits with the same status.
    bad = subprocess.run([sys.executable, "-m", "memnav.cli", "launch", str(path), f"data:={tmp_path / 'none'}",
                          f"domain:={domain}"], env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == CONFIG_ERROR_EXIT, bad.stdout + bad.stderr
    assert "bridge refused its configuration (exit code 2" in bad.stderr and "dataset not found" in bad.stdout
    assert bad.stderr.rstrip().splitlines()[-1].startswith("[launch] exit status 2: bridge refused its configuration")

    proc = subprocess.Popen([sys.executable, "-m", "memnav.cli", "launch", str(path), f"data:={tiny_data}",
                             f"domain:={domain}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    rclpy.init(domain_id=domain)
    node = rclpy.create_node("launch_test_probe")
    try:
        def graph_ready() -> bool:
            rclpy.spin_once(node, timeout_sec=0.05)
            topics = {name for name, _ in node.get_topic_names_and_types()}
            return ("bridge", "/sim") in node.get_node_names_and_namespaces() and "/sim/odom" in topics

        assert wait_for(graph_ready, 30), "bridge did not appear as /sim/bridge publishing /sim/odom"
        assert "/odom" not in {name for name, _ in node.get_topic_names_and_types()}
        time.sleep(3.0)  # stays up
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    pid = int(out.split("bridge: started, pid ")[1].split()[0].rstrip(","))
    assert "crashed" not in out and "SIGTERM" not in out
    assert not running(pid)


def test_large_image_transports_name_the_shipped_profile_and_keep_the_users_settings(monkeypatch, tmp_path):
    """What robot.launch.yaml gives its nodes for full-size images, for processes started outside it (`memnav
    check`, `memnav bench pipeline`): LARGE_DATA and config/fastdds_large_images.xml (shared memory with a 16 MB
    segment), each unless the environment already says otherwise."""
    import xml.etree.ElementTree as ET

    from memnav.ros.launcher import use_large_image_transports

    for name in ("FASTDDS_BUILTIN_TRANSPORTS", "FASTDDS_DEFAULT_PROFILES_FILE"):
        monkeypatch.setenv(name, "")   # recorded, so that what the call sets is undone after the test
        monkeypatch.delenv(name)
    use_large_image_transports()
    assert os.environ["FASTDDS_BUILTIN_TRANSPORTS"] == "LARGE_DATA"
    profile = Path(os.environ["FASTDDS_DEFAULT_PROFILES_FILE"])
    assert profile.name == "fastdds_large_images.xml" and profile.is_file()
    ns = {"f": "http://www.eprosima.com"}
    segment = ET.parse(profile).getroot().find(".//f:transport_descriptor[f:type='SHM']/f:segment_size", ns)
    assert int(segment.text) >= 4 * 640 * 480 * 4   # several 640 x 480 depth images
    own = tmp_path / "own.xml"
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", str(own))
    monkeypatch.setenv("FASTDDS_BUILTIN_TRANSPORTS", "UDPv4")
    use_large_image_transports()
    assert os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] == str(own)
    assert os.environ["FASTDDS_BUILTIN_TRANSPORTS"] == "UDPv4"
