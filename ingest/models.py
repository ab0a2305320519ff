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
