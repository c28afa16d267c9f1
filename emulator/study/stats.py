"""Percentiles of measured samples: the collective runner's results and the PFC timing summaries."""

from __future__ import annotations

import math
from typing import Sequence


def percentile(values: Sequence[float], q: float, nearest_rank: bool = False) -> float:
    """The ``q``-th percentile (0..100) of ``values``; NaN if there are none.

    By linear interpolation between the two nearest samples, as numpy's
    default.  With ``nearest_rank``, the smallest sample that has at least
    q% of them at or below it (numpy's "inverted_cdf"): always one of the
    samples, so a timing summary reports a delay that was measured.
    """
    ordered = sorted(values)
    if not ordered:
        return math.nan
    if nearest_rank:
        return ordered[int(max(1, -(-len(ordered) * q // 100))) - 1]
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
