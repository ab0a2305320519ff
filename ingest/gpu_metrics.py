"""What the cost engine reads about GPU pools: energy, utilisation, power and memory per pool-hour.

Built from ``GpuInterval`` rows (whatever the source's step: 5 minutes … 1 hour, always dividing
the hour). Per GPU and hour the intervals of one step are used — the step that covers most of the
hour, the coarser one on a tie — so an hour pulled at two steps (a step changed, a re-pull) is
never counted twice. Then:

* energy: per interval the increase of the energy counter where the exporter has one, else the
  interval's mean power × its length; summed over the hour's intervals and the pool's GPUs,
  in kWh. With hourly intervals and no counter this is Σ over GPUs of mean power W × 1 h / 1000.
* utilisation: the mean of each GPU's interval means (0–1, clamped), then the mean over the
  pool's GPUs that reported a utilisation.
* power: Σ over the pool's GPUs of each GPU's mean power (the pool's mean draw).
* memory: Σ over GPUs of each GPU's mean used / total MiB (total = the exporter's total where it
  has one, else used + free + reserved).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from ingest.models import GpuInterval

HOUR = timedelta(hours=1)
JOULES_PER_KWH = Decimal(3_600_000)


@dataclass(frozen=True)
class PoolHourMetrics:
    energy_kwh: Decimal | None  # None: neither an energy counter nor power arrived
    mean_utilisation: Decimal | None  # 0–1; None: no utilisation metric arrived
    mean_power_w: Decimal | None  # Σ over GPUs of mean power
    memory_used_mib: Decimal | None  # Σ over GPUs
    memory_total_mib: Decimal | None  # Σ over GPUs
    gpus_reporting: int


def _d(value: float) -> Decimal:
    # repr gives the shortest decimal that reads back as the float: 0.875, not 0.87499999…
    return Decimal(repr(float(value)))


def _mean(values: list[Decimal]) -> Decimal | None:
    return sum(values, Decimal(0)) / len(values) if values else None


@dataclass
class _GpuHour:
    utilisation: Decimal | None
    power_w: Decimal | None
    energy_j: Decimal | None
    memory_used: Decimal | None
    memory_total: Decimal | None


def _choose_step(by_step: dict[int, list[tuple]]) -> list[tuple]:
    step = max(by_step, key=lambda s: (len(by_step[s]) * s, s))
    return by_step[step]


def _gpu_hour(rows: list[tuple]) -> _GpuHour:
    utilisation, power, energy, used, total = [], [], [], [], []
    for step, util, mem_used, mem_free, mem_reserved, mem_total, power_w, energy_j in rows:
        if util is not None:
            utilisation.append(min(max(_d(util), Decimal(0)), Decimal(1)))
        if power_w is not None:
            power.append(_d(power_w))
        if energy_j is not None:
            energy.append(_d(energy_j))
        elif power_w is not None:
            energy.append(_d(power_w) * step)
        if mem_used is not None:
            used.append(_d(mem_used))
        if mem_total is not None:
            total.append(_d(mem_total))
        elif mem_used is not None and mem_free is not None:
            total.append(_d(mem_used) + _d(mem_free) + (_d(mem_reserved) if mem_reserved is not None else 0))
    return _GpuHour(
        utilisation=_mean(utilisation),
        power_w=_mean(power),
        energy_j=sum(energy, Decimal(0)) if energy else None,
        memory_used=_mean(used),
        memory_total=_mean(total),
    )


def _sum(values: list[Decimal | None]) -> Decimal | None:
    present = [value for value in values if value is not None]
    return sum(present, Decimal(0)) if present else None


def _check_hour(moment: datetime, name: str) -> None:
    if moment.tzinfo is None or moment.utcoffset() != timedelta(0) or moment.minute or moment.second:
        raise ValueError(f"{name} must be an hour in UTC, got {moment!r}")


def pool_hour_metrics(
    *, pool_ids: Iterable[int] | None, start: datetime, end: datetime
) -> dict[tuple[int, datetime], PoolHourMetrics]:
    """Metrics per (pool id, hour) for the hours of [start, end) that have any GPU data."""
    _check_hour(start, "start")
    _check_hour(end, "end")
    rows = GpuInterval.objects.filter(interval_start__gte=start, interval_start__lt=end)
    if pool_ids is not None:
        rows = rows.filter(pool_id__in=list(pool_ids))
    grouped: dict[tuple[int, datetime, int], dict[int, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for pool_id, gpu_id, interval_start, step, *values in rows.values_list(
        "pool_id",
        "gpu_id",
        "interval_start",
        "step_seconds",
        "utilisation",
        "memory_used_mib",
        "memory_free_mib",
        "memory_reserved_mib",
        "memory_total_mib",
        "power_w",
        "energy_j",
    ).iterator(chunk_size=10_000):
        if all(value is None for value in values):
            continue
        hour = interval_start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        grouped[(pool_id, hour, gpu_id)][step].append((step, *values))
    per_pool: dict[tuple[int, datetime], list[_GpuHour]] = defaultdict(list)
    for (pool_id, hour, _gpu_id), by_step in grouped.items():
        per_pool[(pool_id, hour)].append(_gpu_hour(_choose_step(by_step)))
    result = {}
    for key, gpus in per_pool.items():
        energy_j = _sum([gpu.energy_j for gpu in gpus])
        result[key] = PoolHourMetrics(
            energy_kwh=energy_j / JOULES_PER_KWH if energy_j is not None else None,
            mean_utilisation=_mean([gpu.utilisation for gpu in gpus if gpu.utilisation is not None]),
            mean_power_w=_sum([gpu.power_w for gpu in gpus]),
            memory_used_mib=_sum([gpu.memory_used for gpu in gpus]),
            memory_total_mib=_sum([gpu.memory_total for gpu in gpus]),
            gpus_reporting=len(gpus),
        )
    return result
