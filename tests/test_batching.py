"""`split_rows`: the micro-batches of a packed batch."""
from __future__ import annotations

import pytest
import torch

from genenv_pl.batching import pack, split_rows


def _packed():
    b = pack([[5, 6], [5, 6, 7, 8], [9], [9]], [[1, 2, 3], [4], [2], [3, 3, 3, 3, 3]], 0,
             [[-0.1, -0.2, -0.3], [-0.4], [-0.5], [-0.6] * 5])
    b["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    b["temperature"] = torch.tensor(0.7)
    return b


@pytest.mark.parametrize("size, widths", [(None, [6]), (4, [6]), (9, [6]), (2, [5, 6]), (3, [5, 6]), (1, [5, 5, 2, 6])])
def test_split_rows_keeps_every_row_and_cuts_only_padding(size, widths):
    b = _packed()
    parts = split_rows(b, size)
    assert [p["input_ids"].shape[1] for p in parts] == widths
    assert sum(p["input_ids"].shape[0] for p in parts) == 4
    assert all(p["temperature"].item() == pytest.approx(0.7) for p in parts)
    i = 0
    for p in parts:
        n, w = p["input_ids"].shape
        for k in ("input_ids", "attention_mask", "response_mask", "old_logp"):
            assert torch.equal(p[k], b[k][i : i + n, :w])
            assert not b[k][i : i + n, w:].any()  # what was cut held nothing
        assert torch.equal(p["advantages"], b["advantages"][i : i + n])
        i += n


def test_split_rows_refuses_a_size_below_one():
    with pytest.raises(ValueError, match="micro_batch_size"):
        split_rows(_packed(), 0)
