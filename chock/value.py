"""Small value classes without dataclasses (docs/architecture.md#start-up).

`@dataclass` writes and compiles each class's methods at import: 0.3–0.5 ms a class, which the forty-odd classes
a session's start imports made a tenth of its own import time. A `Value` is a plain class: its `__slots__` name
its fields (and `__weakref__`, when it has one), which are also its `__init__`'s keyword parameters, and this
base compares, hashes, prints and copies it by those fields, as a frozen dataclass did. A value is not changed
after it is made (nothing stops it; nothing does it): make another with `replace`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Self


class Value:
    """Equal (and hashed) by its fields, the names in `__slots__`, which are also its `__init__`'s parameters."""

    __slots__: tuple[str, ...] = ()
    SECRET: tuple[str, ...] = ()  # fields its printed form leaves out (a credential)

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name in self.__slots__ if name != "__weakref__")  # a slot, not a field

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names())

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._names() if name not in self.SECRET)
        return f"{self.__class__.__qualname__}({fields})"

    def replace(self, **changes: Any) -> Self:
        """This value with the fields `changes` names made anew (through `__init__`, as dataclasses.replace)."""
        fields = {name: getattr(self, name) for name in self._names()}
        return self.__class__(**{**fields, **changes})
