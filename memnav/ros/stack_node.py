"""stack_node: the fused stack. policy_node, encoder_node, memory_node and stop_node in one process, one executor.

Each part is the same code as its own console script (`<name>_node.build`) on its own rclpy Node with its own
name, so parameters files keyed by node name (config/memnav.yaml), services (/memory_node/save, ...) and topics
are exactly those of the multi-process stack; the parts still talk over topics, delivered inside the process by
the DDS implementation (no sockets, no other process to wake up). One SingleThreadedExecutor runs every callback
in turn; the policy node is added first, so when a frame finds several callbacks ready the camera-to-command
path runs before the encoder, memory and stop work of the same frame.

Subscribes / publishes: the union of the four nodes' topics (see their module docstrings).
Parameters: each node's own, under its node name; a `-p name:=value` on the command line reaches every node
that declares `name` (agent, policy_dir, lockstep, action_duration_s are declared by policy_node only), and
is refused when none of them does.
Do not rename with `-r __node:=NAME`: that renames every node of the process.

Start-up errors (here and in every node started through `start_nodes`: those of `run_nodes`, sim_bridge_node
and replay_node): a bad configuration, i.e. a parameter the node refuses (a value its config dataclass rejects, a
missing model file, a bad checkpoint, a value of the wrong type, an override the node does not declare: see
memnav.ros.params), is reported as one line on stderr, `[NODE] error: bad configuration: MESSAGE`, and the process
exits with status `CONFIG_ERROR_EXIT` (2), after rclpy is shut down. Restarting would fail the same way: memnav's
launcher tells it from a crash by this status. A params-file section one typo from a node's name only gets a warning.
Any other exception is a bug and keeps its traceback (exit status 1).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

CONFIG_ERROR_EXIT = 2
"""Exit status of a node that refused to start for a bad configuration (see the module docstring)."""

T = TypeVar("T")
U = TypeVar("U")

# build(node) declares parameters and creates publishers/subscriptions/timers on `node`; returns its clean-up
Builder = Callable[[Any], Callable[[], None]]


def stack_builders() -> list[tuple[str, Builder]]:
    """(node name, build) of the fused stack, in executor order: the policy first (lowest command latency)."""
    from memnav.ros import encoder_node, memory_node, policy_node, stop_node

    return [("policy_node", policy_node.build), ("encoder_node", encoder_node.build),
            ("memory_node", memory_node.build), ("stop_node", stop_node.build)]


def config_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a node's start-up raises for a bad configuration rather than a bug: invalid values
    (ValueError: the config dataclasses, CheckpointError, memnav.ros.params), files that cannot be opened (OSError),
    rclpy's refusals of a parameter or a name, and a memory database that cannot be used."""
    from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException, NameValidationException

    from memnav.core.memory.store import MemoryStoreError

    return (ValueError, OSError, InvalidParameterTypeException, InvalidParameterValueException,
            NameValidationException, MemoryStoreError)


def init_rclpy(program: str, args: Sequence[str]) -> int | None:
    """rclpy.init(args); None when it started, else the status of a configuration error it reported: a ROS
    argument rcl cannot parse (`--ros-args -p a`, no `:=value`) is one line, not rcl's traceback."""
    import rclpy
    from rclpy.impl.implementation_singleton import rclpy_implementation

    try:
        rclpy.init(args=list(args))
    except rclpy_implementation.RCLError as err:
        text = str(err).split(", at /")[0]   # drop rcl's source locations
        return report_config_error(program, ValueError(f"ROS arguments {' '.join(args[1:])!r}: {text}"))
    return None


def report_config_error(program: str, err: BaseException) -> int:
    """Print the one-line report of a configuration error to stderr; returns CONFIG_ERROR_EXIT."""
    message = " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
    print(f"[{program}] error: bad configuration: {message}", file=sys.stderr, flush=True)
    return CONFIG_ERROR_EXIT


def shut_down() -> bool:
    """Whether rclpy's context has been shut down (its SIGTERM handler does that from another thread): an rcl call
    that failed then, inside a spin or a callback (the executor's wait set, a publish), is the shutdown racing the
    call, to be ended like ExternalShutdownException, not a bug."""
    import rclpy

    return not rclpy.ok()


def report_stopped_starting(program: str) -> int:
    """Print that the process was stopped while it started (rclpy was shut down, by SIGTERM say, before the
    nodes were up); returns 0, the status of any other requested stop."""
    print(f"[{program}] stopped while starting (rclpy was shut down, by SIGTERM or a shutdown request)",
          file=sys.stderr, flush=True)
    return 0


def start_nodes(program: str, parts: Sequence[tuple[str, Callable[[Any], T]]], args: Sequence[str], *,
                errors: tuple[type[BaseException], ...] = (), then: Callable[[list[T]], U] | None = None,
                close: Callable[[T], None] | None = None) -> tuple[list[tuple[Any, T]], U | None] | int:
    """The start-up every memnav node process shares (run_nodes, sim_bridge_node, replay_node).

    rclpy.init(args) (init_rclpy); one rclpy Node per (name, build), `build(node)` declaring its parameters; the
    command line's parameter overrides checked against what the nodes declared (memnav.ros.params.check_overrides);
    `then`, for what needs the checked configuration; last, a warning logged by the first node for each params-file
    section one typo from a node's name (memnav.ros.params.misnamed_sections).

    Args:
        program: the name a process-wide configuration error (ROS arguments, overrides, `then`) is reported under;
            a build's is reported under its node's name.
        parts: (node name, build) in order.
        args: the command line, as given to rclpy.init.
        errors: exceptions meaning a bad configuration besides config_errors().
        then: called with the builds' results, in order, after the check; its result is returned.
        close: undoes a build's result when the start-up fails after that build (before its node is destroyed).

    Returns:
        ([(node, build's result)], then's result or None) once started; the caller then owns the nodes and rclpy.
        Else CONFIG_ERROR_EXIT, after reporting the bad configuration in one line on stderr (report_config_error),
        closing and destroying the nodes built and shutting rclpy down; or 0, after the same clean-up, when rclpy
        was shut down during the start-up (rclpy's SIGTERM handler does that; the next rcl call of a build then
        fails), reported in one line (report_stopped_starting). Any other exception (a bug, Ctrl-C) is raised after
        the same clean-up.
    """
    import rclpy
    from rclpy.node import Node

    from memnav.ros.params import check_overrides, guard_parameter_changes, misnamed_sections

    status = init_rclpy(program, args)
    if status is not None:
        return status
    built: list[tuple[Any, T]] = []
    started = False
    try:
        starting = program
        try:
            for name, build in parts:
                starting = name
                node = Node(name)
                try:
                    built.append((node, build(node)))
                except BaseException:
                    node.destroy_node()
                    raise
            starting = program
            check_overrides([node for node, _ in built], args)
            for node, _ in built:
                guard_parameter_changes(node)
            after = then([value for _, value in built]) if then is not None else None
        except (*config_errors(), *errors) as err:
            if shut_down():
                return report_stopped_starting(starting)
            return report_config_error(starting, err)
        except Exception:
            if shut_down():      # rclpy's SIGTERM handler shut the context down: the next rcl call failed
                return report_stopped_starting(starting)
            raise
        if shut_down():          # ... or would have, in the caller
            return report_stopped_starting(program)
        started = True
    finally:
        if not started:
            for node, value in reversed(built):
                if close is not None:
                    close(value)
                node.destroy_node()
            if rclpy.ok():
                rclpy.shutdown()
    for warning in misnamed_sections([node for node, _ in built], args):
        built[0][0].get_logger().warning(warning)
    return built, after


def run_nodes(parts: Sequence[tuple[str, Builder]], argv: list[str] | None = None,
              program: str | None = None) -> int:
    """rclpy.init, one Node per (name, build), spin them all on one SingleThreadedExecutor until Ctrl-C.

    Every node's `main()` is `run_nodes([(its name, its build)], argv)`; this node passes all four. The start-up,
    the check of the command line's parameter overrides against what the nodes declared included, is
    `start_nodes`. Once the nodes spin, SIGINT, SIGTERM and SIGHUP end the spin with rclpy still up
    (`interrupt_on_stop_signals`), so each node's clean-up can still publish.

    Args:
        parts: (node name, build) in executor order.
        argv: the command line (default sys.argv).
        program: the name a process-wide configuration error is reported under (default: the first node's).

    Returns:
        0 after Ctrl-C or an external shutdown; CONFIG_ERROR_EXIT when a node refused its configuration (reported
        as one line on stderr, naming the node).
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    args = list(argv if argv is not None else sys.argv)
    built: list[tuple[Any, Callable[[], None]]] = []
    executor = None
    restore_signals: Callable[[], None] | None = None
    try:
        started = start_nodes(program or (parts[0][0] if parts else "stack_node"), parts, args,
                              close=lambda close: close())
        if isinstance(started, int):
            return started
        built, _ = started
        executor = _ordered_executor(SingleThreadedExecutor)()
        for node, _ in built:
            executor.add_node(node)
        restore_signals = interrupt_on_stop_signals(built[0][0]) if built else None
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # only once the nodes run (start_nodes shuts rclpy down itself before raising a build's bug)
        if not built or not shut_down():
            raise
    finally:
        for node, close in reversed(built):
            close()
            node.destroy_node()
        if restore_signals is not None:
            restore_signals()
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
        if rclpy.ok():
            rclpy.shutdown()
    return 0


def interrupt_on_stop_signals(node: Any) -> Callable[[], None]:
    """From now on SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, which a guard condition of
    `node` wakes out of the executor's wait. rclpy's own handlers shut the context down from a thread of their own
    instead, so the nodes' clean-up had no context left to publish on: the safety node's last, zero /cmd_vel after a
    Ctrl-C or a launcher's SIGINT/SIGTERM never went out, and the base kept the last velocity it was sent. From the
    main thread only (elsewhere nothing changes). Returns the undo: the handlers before (a further SIGTERM then
    ends the process at once)."""
    import os
    import signal
    import threading

    from rclpy.signals import uninstall_signal_handlers

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    uninstall_signal_handlers()
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    wake = node.create_guard_condition(lambda: None)

    def relay() -> None:
        # Python runs a signal handler only between bytecodes of the main thread, which waits inside rcl: the byte
        # the signal writes to the wakeup fd is turned into a guard condition that ends that wait
        while os.read(read_fd, 64):
            try:
                wake.trigger()
            except Exception:    # the node is gone: the process is ending anyway
                return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # SIGHUP too (the terminal of an ssh session that dropped), unless ignored (nohup)
    stops = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
                                               else [])
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    previous = {signum: signal.signal(signum, interrupt) for signum in stops}
    thread = threading.Thread(target=relay, daemon=True, name="stop-signal-relay")
    thread.start()

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(write_fd)     # the relay reads the end of the pipe and returns
        thread.join(timeout=1.0)
        os.close(read_fd)

    return restore


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
    return run_nodes(stack_builders(), argv, program="stack_node")


if __name__ == "__main__":
    sys.exit(main())
