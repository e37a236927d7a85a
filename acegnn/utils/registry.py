"""Name -> component registries whose entries may live in optional back-ends.

An entry names its target as a class or as ``"module:attribute"``; a string is imported
only when the entry is used, so registering a back-end costs nothing when it is not
installed. An entry may name the modules its back-end needs and the pip extra that
installs them: using it without them raises :class:`MissingBackend` with the install
command, before anything imports the back-end.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any, Dict, Generic, Iterator, Optional, Tuple, TypeVar, Union

T = TypeVar("T")


class MissingBackend(ValueError):
    """An optional back-end is not installed."""


@dataclass(frozen=True)
class Entry:
    target: Union[str, Any]
    extra: Optional[str] = None
    requires: Tuple[str, ...] = ()
    value: Any = None  # extra payload (for example a learner's config classes)
    install: Optional[str] = None  # how to install the back-end, when an extra is not enough


def _resolve(target: Union[str, Any]) -> Any:
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


class Registry(Generic[T]):
    """Registered components of one kind (``"env"``, ``"algo"``), by name.

    Args:
        kind (str): What the names name, as in the config (``env.name``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: Dict[str, Entry] = {}

    def register(self, name: str, target: Union[str, Any], extra: Optional[str] = None,
                 requires: Tuple[str, ...] = (), value: Any = None,
                 replace: bool = False, install: Optional[str] = None) -> None:
        """Register ``target`` under ``name``.

        Args:
            name (str): The name configs use.
            target (str or object): The component, or ``"module:attribute"`` to import
                when it is first used.
            extra (str, optional): The pip extra that installs the back-end.
            requires (tuple of str, optional): Modules the back-end needs (dotted names
                allowed).
            value (optional): Anything else to keep with the entry.
            replace (bool, optional): Allow replacing an entry of the same name.
                (default: :obj:`False`)
            install (str, optional): The install instructions the error names instead of
                the extra's pip command.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string (got {name!r})")
        if name in self._entries and not replace and self._entries[name].target is not target:
            raise ValueError(f"{self.kind}.name '{name}' is already registered; pass "
                             f"replace=True to replace it")
        self._entries[name] = Entry(target, extra, tuple(requires), value, install)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def entry(self, name: str) -> Entry:
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind}.name '{name}' (choose from {sorted(self)})")
        return self._entries[name]

    def available(self, name: str) -> None:
        """Raise :class:`MissingBackend` if the back-end of ``name`` is not installed."""
        e = self.entry(name)
        missing = [m for m in e.requires if not _installed(m)]
        if missing:
            how = e.install or (f"pip install -e '.[{e.extra}]'" if e.extra else
                                f"install {', '.join(missing)}")
            raise MissingBackend(f"{self.kind}.name={name} needs {', '.join(missing)}, which "
                                 f"is not installed: {how}")

    def get(self, name: str, check: bool = True) -> T:
        """The registered component (imported now if it was registered by path);
        ``check``: first raise :class:`MissingBackend` if its back-end is not installed."""
        if check:
            self.available(name)
        return _resolve(self.entry(name).target)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _installed(module: str) -> bool:
    """Whether ``module`` (dotted names too) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False
