"""Ingestion state and raw attempts.

``Attempt`` is the raw usage table, partitioned by month in SQL (see migration 0002 and
``ingest.partitions``); Django reads it through an unmanaged model. Every other model here is
the ingestors' own bookkeeping: sources, per-file checkpoints, runs, rejected records, the
cardinality guard, and the hours whose costs must be recomputed.
"""

from __future__ import annotations

from django.db import models


class SourceKind(models.TextChoices):
    FILES = "files", "Files (ingest_usage)"
    DIRECTORY = "directory", "Directory (watched)"
    HTTP = "http", "HTTP batch API"
    OTLP = "otlp", "OTLP/HTTP traces"


class Source(models.Model):
    """Where usage comes from. Idempotency keys are unique within one source."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=SourceKind.choices, default=SourceKind.FILES)
    # For directory sources: the folder scanned on the beat schedule.
    path = models.CharField(max_length=1000, blank=True, default="")
    # File-level defaults and format: {"format": "auto", "team": …, "workload": …, "endpoint": …}.
    options = models.JSONField(default=dict, blank=True)
    dimension_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="default: INGEST_DIMENSION_LIMIT"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Dimension(models.TextChoices):
    TEAM = "team", "team"
    WORKLOAD = "workload", "workload"
    MODEL = "model", "model"
    ENDPOINT = "endpoint", "endpoint"


class SourceDimensionValue(models.Model):
    """Each distinct dimension value a source has written: the cardinality guard counts these."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="dimension_values")
    dimension = models.CharField(max_length=16, choices=Dimension.choices)
    value_id = models.IntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "dimension", "value_id"], name="sourcedimensionvalue_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source_id}:{self.dimension}={self.value_id}"


class ErrorType(models.Model):
    """Error types named by failed attempts (``rate_limit_exceeded`` …), kept once."""

    name = models.CharField(max_length=200, unique=True)

    def __str__(self) -> str:
        return self.name


class FileCheckpoint(models.Model):
    """How far a file has been ingested, committed with the rows it covers.

    ``items_done`` counts records and rejects already committed; a resumed run skips that many
    (the parse is deterministic), so a crash mid-file neither loses nor repeats anything. A file
    whose first bytes changed is a new file and starts over (the idempotency keys still make
    re-reading harmless); a grown file continues after its committed items.
    """

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="checkpoints")
    path = models.CharField(max_length=1000)
    size = models.BigIntegerField()
    head_hash = models.CharField(max_length=64)
    items_done = models.BigIntegerField(default=0)
    complete = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "path"], name="filecheckpoint_source_path_unique")
        ]

    def __str__(self) -> str:
        return f"{self.path} ({self.items_done} items)"


class IngestRun(models.Model):
    """One ingest of one file or one HTTP request, with its counts."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="runs")
    origin = models.CharField(max_length=1000)  # file path, or "request …"
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    accepted = models.BigIntegerField(default=0)
    duplicate = models.BigIntegerField(default=0)
    rejected = models.BigIntegerField(default=0)
    error = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["source", "started_at"])]

    def __str__(self) -> str:
        return f"{self.origin} at {self.started_at:%Y-%m-%d %H:%M}"


class RejectedRecord(models.Model):
    """A record we refused, with where it was and why; never the prompt or output."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="rejects")
    run = models.ForeignKey(IngestRun, on_delete=models.CASCADE, related_name="rejects", null=True)
    location = models.CharField(max_length=1000)
    reason = models.CharField(max_length=500)
    excerpt = models.CharField(max_length=400, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["source", "created_at"])]

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


class DirtyHour(models.Model):
    """An hour (UTC) whose attempts changed: the cost engine recomputes its buckets."""

    hour = models.DateTimeField(primary_key=True)
    marked_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}:00"


class Attempt(models.Model):
    """One attempt (usage record). Lean on purpose: ~1 billion rows a month.

    Dimensions are integer ids (teams, workloads, models, endpoints, error types); the
    idempotency key and task id are kept as 64-bit hashes for de-duplication and task counting,
    with the task id itself for drill-down. No prompt or output is ever stored.
    """

    # The idempotency key within a source; ts is in it because Postgres requires the partition
    # key in every unique index of a partitioned table (a re-sent record has the same ts).
    pk = models.CompositePrimaryKey("source_id", "key_hash", "ts")
    ts = models.DateTimeField()
    key_hash = models.BigIntegerField()
    task_hash = models.BigIntegerField()
    source_id = models.IntegerField()
    team_id = models.IntegerField(null=True)
    workload_id = models.IntegerField(null=True)
    model_id = models.IntegerField()
    endpoint_id = models.IntegerField(null=True)
    error_type_id = models.IntegerField(null=True)
    prompt_tokens = models.IntegerField()
    completion_tokens = models.IntegerField()
    cached_tokens = models.IntegerField()
    reasoning_tokens = models.IntegerField(null=True)
    latency_ms = models.IntegerField(null=True)
    ttft_ms = models.IntegerField(null=True)
    queue_wait_ms = models.IntegerField(null=True)
    attempt = models.SmallIntegerField()
    http_status = models.SmallIntegerField(null=True)
    succeeded = models.BooleanField()
    task_id = models.TextField()

    class Meta:
        managed = False
        db_table = "ingest_attempt"

    def __str__(self) -> str:
        return f"{self.task_id}#{self.attempt} at {self.ts:%Y-%m-%d %H:%M:%S}"


# --- Prometheus: GPU and inference-server metrics --------------------------------------------
# Measurements, not money: stored as double precision (an increase() is extrapolated by
# Prometheus and is rarely a whole number anyway). Every time is UTC; an interval is
# [interval_start, interval_start + step_seconds).


def default_prometheus_url() -> str:
    from django.conf import settings

    return settings.PROMETHEUS_URL or ""


# Steps divide an hour, so the cost engine can add a whole hour out of whole intervals.
METRIC_STEP_CHOICES = [
    (300, "5 minutes"),
    (600, "10 minutes"),
    (900, "15 minutes"),
    (1200, "20 minutes"),
    (1800, "30 minutes"),
    (3600, "1 hour"),
]


class PrometheusSource(models.Model):
    """A Prometheus server to pull GPU and inference-server aggregates from.

    ``auth_header_env`` maps HTTP header names to the *names* of environment variables holding
    their values (``{"Authorization": "PROMETHEUS_AUTH"}``), so no secret is stored here.
    """

    id = models.AutoField(primary_key=True)
    name = models.CharField(max_length=100, unique=True)
    url = models.CharField(max_length=500, blank=True, default=default_prometheus_url)
    auth_header_env = models.JSONField(default=dict, blank=True)
    step_seconds = models.PositiveIntegerField(default=3600, choices=METRIC_STEP_CHOICES)
    # The targets' scrape interval: pulls stay two of these behind now so the last window is whole.
    scrape_interval_seconds = models.PositiveIntegerField(default=60)
    # How far back the first pull of a new source starts (later pulls start at the checkpoints).
    initial_backfill_hours = models.PositiveIntegerField(default=24)
    # vLLM/SGLang series → catalog endpoints: a label whose value is the endpoint name, and/or
    # {"endpoint name": {"label": "regex"}}.
    endpoint_label = models.CharField(max_length=100, blank=True, default="")
    endpoint_match = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_pull_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    # now − the oldest checkpoint, at the end of the last pull.
    lag_seconds = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(step_seconds__in=[value for value, _ in METRIC_STEP_CHOICES]),
                name="prometheussource_step_divides_hour",
            )
        ]

    def __str__(self) -> str:
        return self.name


class MetricCheckpoint(models.Model):
    """End of the last fully committed, step-aligned window of one query of one source.

    Advanced in the same transaction as the rows of that window, so a pull that dies anywhere
    resumes at the first window it did not commit.
    """

    id = models.AutoField(primary_key=True)
    source = models.ForeignKey(PrometheusSource, on_delete=models.CASCADE, related_name="checkpoints")
    query_key = models.CharField(max_length=200)
    window_end = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "query_key"], name="metriccheckpoint_source_query_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.query_key} until {self.window_end:%Y-%m-%d %H:%M}"


class GpuVendor(models.TextChoices):
    NVIDIA = "nvidia", "NVIDIA"
    AMD = "amd", "AMD"


class GpuDevice(models.Model):
    """One GPU (or MIG instance / AMD partition) as the exporter identifies it."""

    id = models.AutoField(primary_key=True)
    vendor = models.CharField(max_length=16, choices=GpuVendor.choices)
    hostname = models.CharField(max_length=255, blank=True, default="")
    # NVIDIA: the UUID; AMD: serial_number, else gpu_uuid, else "gpu<gpu_id>".
    device_key = models.CharField(max_length=255)
    partition = models.CharField(max_length=64, blank=True, default="")  # GPU_I_ID / gpu_partition_id
    gpu_index = models.CharField(max_length=32, blank=True, default="")
    gpu_model = models.CharField(max_length=200, blank=True, default="")
    # The pool whose label matchers matched it last.
    pool = models.ForeignKey(
        "costcenter.Pool", null=True, blank=True, on_delete=models.SET_NULL, related_name="gpu_devices"
    )
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["vendor", "hostname", "gpu_index", "device_key"]
        constraints = [
            models.UniqueConstraint(
                fields=["vendor", "hostname", "device_key", "partition"], name="gpudevice_identity_unique"
            )
        ]

    def __str__(self) -> str:
        where = f"{self.hostname}/" if self.hostname else ""
        return f"{where}{self.gpu_index or self.device_key}"


class GpuInterval(models.Model):
    """Aggregates of one GPU over one interval, as Prometheus computed them.

    Each metric family fills its own columns (and upserts only those), so a family re-pulled
    over an overlap rewrites the same numbers and leaves the others alone.
    """

    gpu = models.ForeignKey(GpuDevice, on_delete=models.CASCADE, related_name="intervals")
    # The pool it was pulled for: history stays with the pool of its time if a host moves.
    pool = models.ForeignKey("costcenter.Pool", on_delete=models.CASCADE, related_name="+")
    source = models.ForeignKey(PrometheusSource, null=True, on_delete=models.SET_NULL, related_name="+")
    interval_start = models.DateTimeField()
    step_seconds = models.PositiveIntegerField()
    utilisation = models.FloatField(null=True)  # mean, 0–1
    memory_used_mib = models.FloatField(null=True)  # means, MiB
    memory_free_mib = models.FloatField(null=True)
    memory_reserved_mib = models.FloatField(null=True)
    memory_total_mib = models.FloatField(null=True)  # only where the exporter reports a total
    power_w = models.FloatField(null=True)  # mean, W
    energy_j = models.FloatField(null=True)  # increase of the energy counter, joules
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "interval_start", "step_seconds"], name="gpuinterval_gpu_interval_unique"
            )
        ]
        indexes = [models.Index(fields=["pool", "interval_start"])]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} at {self.interval_start:%Y-%m-%d %H:%M} ({self.step_seconds}s)"


class InferenceServer(models.TextChoices):
    VLLM = "vllm", "vLLM"
    SGLANG = "sglang", "SGLang"


class InferenceSeries(models.Model):
    """A served model on an inference server: ``model_name`` plus the endpoint labels."""

    id = models.AutoField(primary_key=True)
    source = models.ForeignKey(PrometheusSource, on_delete=models.CASCADE, related_name="inference_series")
    server = models.CharField(max_length=16, choices=InferenceServer.choices)
    model_name = models.CharField(max_length=300)
    labels = models.JSONField(default=dict)  # the grouping labels besides model_name
    labels_key = models.CharField(max_length=500, blank=True, default="")
    endpoint = models.ForeignKey(
        "costcenter.Endpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    model = models.ForeignKey(
        "costcenter.LlmModel", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["server", "model_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "server", "model_name", "labels_key"],
                name="inferenceseries_identity_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.server}:{self.model_name}"


class InferenceInterval(models.Model):
    """Aggregates of one served model over one interval.

    Token counts are increases (extrapolated to the window edges, like Prometheus' increase(), so
    not always whole); histograms map each bucket's upper bound ``le`` (as the exporter wrote it)
    to the increase of its cumulative count, so percentiles can be estimated later.
    """

    series = models.ForeignKey(InferenceSeries, on_delete=models.CASCADE, related_name="intervals")
    interval_start = models.DateTimeField()
    step_seconds = models.PositiveIntegerField()
    prompt_tokens = models.FloatField(null=True)
    generation_tokens = models.FloatField(null=True)
    running_mean = models.FloatField(null=True)
    running_max = models.FloatField(null=True)
    waiting_mean = models.FloatField(null=True)
    waiting_max = models.FloatField(null=True)
    kv_cache_usage_mean = models.FloatField(null=True)  # 0–1
    ttft_buckets = models.JSONField(null=True)
    e2e_latency_buckets = models.JSONField(null=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["series", "interval_start", "step_seconds"], name="inferenceinterval_interval_unique"
            )
        ]
        indexes = [models.Index(fields=["interval_start"])]

    def __str__(self) -> str:
        return f"series {self.series_id} at {self.interval_start:%Y-%m-%d %H:%M} ({self.step_seconds}s)"


class UnmatchedSeries(models.Model):
    """A GPU whose series match no pool's label matchers: kept and counted, never silently dropped."""

    id = models.AutoField(primary_key=True)
    source = models.ForeignKey(PrometheusSource, on_delete=models.CASCADE, related_name="unmatched_series")
    vendor = models.CharField(max_length=16, choices=GpuVendor.choices)
    labels = models.JSONField(default=dict)
    labels_key = models.CharField(max_length=500)
    first_interval = models.DateTimeField()
    last_interval = models.DateTimeField()
    intervals = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["vendor", "labels_key"]
        verbose_name_plural = "unmatched series"
        constraints = [
            models.UniqueConstraint(
                fields=["source", "vendor", "labels_key"], name="unmatchedseries_identity_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.vendor} {self.labels_key}"


class TaskStart(models.Model):
    """How many times a Celery task (one message, one task id) has started.

    Tasks are acknowledged late, so a message whose worker dies is delivered again; a message that
    kills its worker every time would loop forever. Each start is counted here, in its own commit
    before the task's work, and a start beyond ``CELERY_TASK_MAX_STARTS`` is refused with the
    reason kept in ``refused`` (and, for ingest tasks, on an IngestRun and the source). Rows older
    than a week are pruned by the daily partition task.
    """

    task_id = models.CharField(max_length=155, primary_key=True)  # Celery's task id (a UUID)
    name = models.CharField(max_length=200)
    starts = models.PositiveIntegerField(default=0)
    first_started_at = models.DateTimeField()
    last_started_at = models.DateTimeField()
    # The worker (node name) of the latest start: which worker did a task, after the fact.
    worker = models.CharField(max_length=200, blank=True, default="")
    refused = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["last_started_at"])]

    def __str__(self) -> str:
        return f"{self.name} {self.task_id} ({self.starts} starts)"
