"""Fixed log-spaced histograms, so percentiles can be read from hourly rollups.

Bucket 0 holds values below ``BASE``; bucket i ≥ 1 holds [BASE·R^(i−1), BASE·R^i), with
R = 2^(1/4); the last bucket also takes everything larger. A percentile is reported as the
geometric middle of its bucket, so it is within a factor R^(1/2) of the true value: a relative
error of at most 2^(1/8) − 1 ≈ 9.05 %. Rollups of any size merge by adding counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RATIO = 2**0.25
BUCKETS = 96
MAX_RELATIVE_ERROR = 2**0.125 - 1


@dataclass(frozen=True)
class Scale:
    name: str
    base: float  # lower edge of bucket 1, in the metric's unit

    def sql_bucket(self, expression: str) -> str:
        """SQL computing the bucket of ``expression`` (NULL stays NULL; keep in step with ``bucket``)."""
        # NULL first: Postgres' LEAST ignores NULLs, so LEAST(95, NULL) would be 95 and every
        # attempt without the measurement would land in the last bucket.
        return (
            f"CASE WHEN ({expression}) IS NULL THEN NULL WHEN ({expression}) < {self.base} THEN 0 "
            f"ELSE LEAST({BUCKETS - 1}, floor(ln(({expression})::float8 / {self.base}) / ln({RATIO}))::int + 1) END"
        )

    def bucket(self, value: float) -> int:
        if value < self.base:
            return 0
        return min(BUCKETS - 1, math.floor(math.log(value / self.base) / math.log(RATIO)) + 1)

    def representative(self, bucket: int) -> float:
        """The geometric middle of a bucket (bucket 0: half its upper edge)."""
        if bucket == 0:
            return self.base / 2
        low = self.base * RATIO ** (bucket - 1)
        return low * math.sqrt(RATIO)


LATENCY_MS = Scale("latency_ms", base=1.0)  # 1 ms … ~13 days in 96 buckets
TTFT_MS = Scale("ttft_ms", base=1.0)
OUTPUT_TOKENS_PER_S = Scale("output_tokens_per_s", base=0.25)


def merge(histograms: Sequence[Sequence[int] | None]) -> list[int]:
    total = [0] * BUCKETS
    for counts in histograms:
        if counts:
            for index, count in enumerate(counts):
                total[index] += count
    return total


def percentile(counts: Sequence[int], q: float, scale: Scale) -> float | None:
    """The q-quantile (0 < q ≤ 1) of a histogram, or None when it is empty."""
    n = sum(counts)
    if n == 0:
        return None
    rank = max(1, math.ceil(q * n))
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            return scale.representative(index)
    return scale.representative(len(counts) - 1)
