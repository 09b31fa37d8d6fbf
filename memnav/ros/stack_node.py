"""stack_node: the fused stack. policy_node, encoder_node, memory_node and stop_node in one process, one executor.

Each part is the same code as its own console script (`<name>_node.build`) on its own rclpy Node with its own
name, so parameters files keyed by node name (config/memnav.yaml), services (/memory_node/save, ...) and topics
are exactly those of the multi-process stack; the parts still talk over topics, delivered inside the process by
the DDS implementation (no sockets, no other process to wake up). One SingleThreadedExecutor runs every callback
in turn; the policy node is added first, so when a frame finds several callbacks ready the camera-to-command
path runs before the encoder, memory and stop work of the same frame.

Subscribes / publishes: the union of the four nodes' topics (see their module docstrings).
Parameters: each node's own, under its node name; a `-p name:=value` on the command line reaches every node
that declares `name` (agent, policy_dir, lockstep, action_duration_s are declared by policy_node only).
Do not rename with `-r __node:=NAME`: that renames every node of the process.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

# build(node) declares parameters and creates publishers/subscriptions/timers on `node`; returns its clean-up
Builder = Callable[[Any], Callable[[], None]]


def stack_builders() -> list[tuple[str, Builder]]:
    """(node name, build) of the fused stack, in executor order: the policy first (lowest command latency)."""
    from memnav.ros import encoder_node, memory_node, policy_node, stop_node

    return [("policy_node", policy_node.build), ("encoder_node", encoder_node.build),
            ("memory_node", memory_node.build), ("stop_node", stop_node.build)]


def run_nodes(parts: Sequence[tuple[str, Builder]], argv: list[str] | None = None) -> int:
    """rclpy.init, one Node per (name, build), spin them all on one SingleThreadedExecutor until Ctrl-C.

    Every node's `main()` is `run_nodes([(its name, its build)], argv)`; this node passes all four.

    Raises:
        ValueError: a node's parameters are invalid (raised by its build, before anything spins).
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.node import Node

    rclpy.init(args=argv if argv is not None else sys.argv)
    executor = _ordered_executor(SingleThreadedExecutor)()
    built: list[tuple[Any, Callable[[], None]]] = []
    try:
        for name, build in parts:
            node = Node(name)
            try:
                close = build(node)
            except BaseException:
                node.destroy_node()
                raise
            built.append((node, close))
            executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        for node, close in reversed(built):
            close()
            node.destroy_node()
        executor.shutdown(timeout_sec=1.0)
        if rclpy.ok():
            rclpy.shutdown()
    return 0


def _ordered_executor(base: type) -> type:
    """`base` serving ready callbacks node by node in the order the nodes were added (rclpy keeps its nodes in a
    set, so which node's callbacks run first would be arbitrary)."""

    class OrderedExecutor(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._order: list[Any] = []

        def add_node(self, node: Any) -> bool:
            if node not in self._order:
                self._order.append(node)
            return super().add_node(node)

        def get_nodes(self) -> list[Any]:
            current = set(super().get_nodes())
            return [n for n in self._order if n in current] + [n for n in current if n not in self._order]

    return OrderedExecutor


def main(argv: list[str] | None = None) -> int:
    return run_nodes(stack_builders(), argv)


if __name__ == "__main__":
    sys.exit(main())
