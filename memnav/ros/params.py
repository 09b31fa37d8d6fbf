"""ROS parameters declared from config dataclasses (the dataclass is the single source of truth)."""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def declare_dataclass(node: Any, cls: type[T], prefix: str = "") -> T:
    """Declare one parameter per field of `cls` (default = the field's default), read them back, build `cls`.

    Tuples become lists on the parameter server and tuples again here. A value the dataclass rejects
    raises its ValueError (naming the field), so a bad params file stops the node at start-up.
    """
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            raise TypeError(f"{cls.__name__}.{f.name} needs a default to become a ROS parameter")
        name = f"{prefix}{f.name}"
        declared = list(default) if isinstance(default, tuple) else default
        value = node.declare_parameter(name, declared).value
        if isinstance(default, tuple):
            value = tuple(value)
        elif hints.get(f.name) is float and isinstance(value, int):
            value = float(value)
        values[f.name] = value
    return cls(**values)
