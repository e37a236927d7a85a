"""``train.keep_heap``: freed memory kept in the heap (glibc), so that tensors allocated
again reuse its pages instead of faulting fresh ones in."""
import ctypes
import subprocess
import sys

import pytest

from acegnn.utils.heap import keep_freed_memory


def glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version
        return sys.platform.startswith("linux")
    except (OSError, AttributeError):
        return False


# A 24 MiB tensor allocated and freed in a fresh process; glibc's ``mallinfo2`` says
# whether it was mapped from the kernel on its own (hblkhd) and how large the heap stays
# once it is freed (arena: bytes the heap holds, its free top included).
BLOCK = """
import ctypes, sys, torch
from acegnn.utils.heap import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    assert keep_freed_memory()
before = mallinfo2()
x = torch.ones(6 << 20)
held = mallinfo2()
del x
freed = mallinfo2()
MiB = 1 << 20
print(round((held.hblkhd - before.hblkhd) / MiB), round((freed.arena - before.arena) / MiB))
"""


@pytest.mark.skipif(not glibc() or not hasattr(ctypes.CDLL(None), "mallinfo2"),
                    reason="glibc 2.33 or later")
def test_kept_heap_serves_a_large_tensor_and_keeps_it_once_freed():
    def run(mode):
        out = subprocess.run([sys.executable, "-c", BLOCK, mode], capture_output=True,
                             text=True, check=True)
        return [int(v) for v in out.stdout.split()[-2:]]

    mapped, kept = run("default")
    assert mapped >= 24 and kept < 24  # glibc's default: mapped alone, unmapped when freed
    mapped, kept = run("keep")
    assert mapped == 0 and kept >= 24  # from the heap, which keeps it


def test_keep_freed_memory_says_whether_it_was_applied():
    assert keep_freed_memory() is glibc()
