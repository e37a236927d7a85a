"""Files that are never left half-written."""
from __future__ import annotations

import os
from typing import Callable


def atomic_write(path: str, write: Callable[[str], object]) -> None:
    """Call ``write`` on a temporary path, then rename it to ``path``: a crash or a kill
    leaves either the old file or the new one, never a half-written one."""
    tmp = path + ".tmp"
    write(tmp)
    os.replace(tmp, path)


def write_text(path: str, text: str) -> None:
    """Atomically replace the text file ``path`` by ``text``."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, write)
