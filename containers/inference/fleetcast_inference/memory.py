"""How much memory a loaded model holds, measured rather than guessed.

:func:`retained_bytes` walks the objects a loaded model keeps (numpy arrays with their
buffers, strings, numbers, containers, slotted dataclasses) and adds up their sizes as
the interpreter reports them. The unit tests check it against ``tracemalloc``'s count
of what loading actually left allocated.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np


def retained_bytes(root: object) -> int:
    """Bytes of ``root`` and of every object reachable from it, each counted once."""
    seen: set[int] = set()
    pending = [root]
    total = 0
    while pending:
        item = pending.pop()
        if item is None or isinstance(item, bool) or id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, np.ndarray):
            # A view's getsizeof leaves out the buffer it shares; count its owner instead.
            if item.base is not None:
                pending.append(item.base)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            pending.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            pending.extend(getattr(item, field.name) for field in dataclasses.fields(item))
            if hasattr(item, "__dict__"):
                pending.append(item.__dict__)
    return total
