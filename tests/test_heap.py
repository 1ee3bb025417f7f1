"""`heap.trim` gives a fragmented heap's free pages back to the OS, and `HeapTrim` trims after each phase of a fit."""
from __future__ import annotations

import pytest
import torch

from genenv_pl import heap

pytestmark = pytest.mark.skipif(heap._malloc_trim() is None, reason="needs glibc's malloc_trim")


def _rss_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20


def test_trim_releases_free_pages_in_the_middle_of_the_heap():
    # 64 KiB tensors live on the heap (below glibc's mmap threshold). Keeping every 8th one alive
    # leaves the freed ones between live chunks, where glibc's own trimming (top of heap only) cannot reach.
    keep, free = [], []
    for i in range(4000):
        (keep if i % 8 == 0 else free).append(torch.ones(16 * 1024))
    freed_mb = len(free) * 64 / 1024
    del free
    held = _rss_mb()
    assert heap.trim()
    released = held - _rss_mb()
    assert released > 0.5 * freed_mb, f"released {released:.0f} of {freed_mb:.0f} MB freed"
    assert all(t[0].item() == 1.0 for t in keep)  # live tensors are untouched
