"""One goal-status vocabulary (memnav.ros.goal_status) for the policy node that publishes it and the stop node and
`memnav goal` that read it. The stop node and goal_command kept copies of the statuses that end a goal, and the
policy node wrote them as bare strings: a status added or renamed in one place went unnoticed in the others."""
import ast
import json

from memnav.ros import goal_command, stop_node
from memnav.ros.goal_status import ENDED_BY_STOP, ENDED_STATUSES, ENDED_WITHOUT_STOP, GoalStatus
from memnav.ros.model_paths import PACKAGE_ROOT

POLICY_NODE = PACKAGE_ROOT / "memnav" / "ros" / "policy_node.py"


def _published_statuses() -> tuple[set[str], list[str]]:
    """The GoalStatus members policy_node passes to its goal_status(), and the arguments that are something else. A
    name passed is followed to its assignments in the same function (a status chosen before the call), and
    `GoalStatus(...)` (a status read back from the kept goal's record) counts as one of them."""
    tree = ast.parse(POLICY_NODE.read_text())
    used, other = set(), []
    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]

    def options_of(arg: ast.expr, scope: ast.AST) -> list[ast.expr]:
        if isinstance(arg, ast.IfExp):
            return options_of(arg.body, scope) + options_of(arg.orelse, scope)
        if isinstance(arg, ast.Name):
            values = [a.value for a in ast.walk(scope) if isinstance(a, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == arg.id for t in a.targets)]
            if values:
                return [o for v in values for o in options_of(v, scope)
                        if not (isinstance(o, ast.Constant) and o.value is None)]   # None: no status then
        return [arg]

    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "goal_status":
            scope = min((f for f in functions if f.lineno <= call.lineno <= f.end_lineno),
                        key=lambda f: f.end_lineno - f.lineno)
            for opt in options_of(call.args[0], scope):
                if isinstance(opt, ast.Call) and isinstance(opt.func, ast.Name) and opt.func.id == "GoalStatus":
                    continue
                if (isinstance(opt, ast.Attribute) and isinstance(opt.value, ast.Name)
                        and opt.value.id == "GoalStatus"):
                    used.add(opt.attr)
                else:
                    other.append(ast.unparse(opt))
    return used, other


def test_the_policy_node_publishes_the_shared_statuses_and_all_of_them():
    used, other = _published_statuses()
    assert other == [], f"policy_node publishes goal statuses outside GoalStatus: {other}"
    assert used == set(GoalStatus.__members__), (used, set(GoalStatus.__members__))
    ends = {GoalStatus[name] for name in used} - {GoalStatus.ACTIVE}
    assert ends == ENDED_STATUSES   # every status but "active" ends a goal, and the stop node knows each
    doc = ast.get_docstring(ast.parse(POLICY_NODE.read_text()))
    assert all(f'"{s.value}"' in doc for s in GoalStatus), "policy_node's docstring names every goal status"


def test_the_readers_use_the_shared_sets():
    assert stop_node.ENDED_STATUSES is ENDED_STATUSES
    assert goal_command.ENDED_WITHOUT_STOP is ENDED_WITHOUT_STOP
    assert ENDED_BY_STOP | ENDED_WITHOUT_STOP == ENDED_STATUSES and not ENDED_BY_STOP & ENDED_WITHOUT_STOP
    assert GoalStatus.ACTIVE not in ENDED_STATUSES


def test_statuses_are_their_strings_on_the_wire_and_in_text():
    """Published as JSON, read back as plain strings (the stop node, `memnav goal`), shown in /diagnostics."""
    body = json.loads(json.dumps({"status": GoalStatus.CANCELLED}))
    assert body == {"status": "cancelled"} and body["status"] in ENDED_WITHOUT_STOP
    assert "budget" in ENDED_BY_STOP and "active" not in ENDED_STATUSES
    assert str(GoalStatus.ABANDONED) == f"{GoalStatus.ABANDONED}" == "abandoned"
    assert {s.value for s in GoalStatus} == {"active", "stopped", "budget", "cancelled", "ended", "abandoned"}
