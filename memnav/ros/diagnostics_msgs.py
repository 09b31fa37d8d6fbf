"""memnav.core.diagnostics' NodeDiagnostic as a diagnostic_msgs/DiagnosticArray on /diagnostics (ROS's standard
topic for rqt_robot_monitor, diagnostic_aggregator and Foxglove's diagnostics panel)."""
from __future__ import annotations

from collections.abc import Callable

from memnav.core.diagnostics import NodeDiagnostic

PERIOD_S = 1.0   # nodes report once a second, as diagnostic_updater does by default


def create_publisher(node):
    """The node's /diagnostics publisher (relative: /robot1/diagnostics in a namespace, one per robot)."""
    from diagnostic_msgs.msg import DiagnosticArray

    return node.create_publisher(DiagnosticArray, "diagnostics", 10)


def diagnostic_array(node, diag: NodeDiagnostic):
    """One DiagnosticStatus named after the node (its full name, e.g. /policy_node), stamped now."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    status = DiagnosticStatus(level=bytes([int(diag.level)]), name=node.get_fully_qualified_name(),
                              message=diag.message, hardware_id="memnav",
                              values=[KeyValue(key=k, value=v) for k, v in diag.values.items()])
    msg = DiagnosticArray(status=[status])
    msg.header.stamp = node.get_clock().now().to_msg()
    return msg


def report_every_period(node, diagnose: Callable[[int], NodeDiagnostic], dropped: Callable[[], int]) -> None:
    """Publish `diagnose(new)` on the node's diagnostics topic every PERIOD_S, `new` being how many messages were
    dropped since the last report (`dropped()` counts them since the start)."""
    pub = create_publisher(node)
    seen = {"dropped": 0}

    def report() -> None:
        total = dropped()
        new, seen["dropped"] = total - seen["dropped"], total
        pub.publish(diagnostic_array(node, diagnose(new)))

    node.create_timer(PERIOD_S, report)
