"""Admin for ingestion: sources are edited here; runs, rejects and checkpoints are read-only."""

from __future__ import annotations

from django.contrib import admin

from ingest.models import FileCheckpoint, IngestRun, RejectedRecord, Source, TaskStart


@admin.register(Source)
class SourceAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "path", "last_success_at", "last_error"]
    list_filter = ["kind"]
    search_fields = ["name", "path"]
    readonly_fields = ["created_at", "last_run_at", "last_success_at", "last_error"]


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(IngestRun)
class IngestRunAdmin(ReadOnlyAdmin):
    list_display = ["origin", "source", "started_at", "finished_at", "accepted", "duplicate", "rejected"]
    list_filter = ["source"]
    date_hierarchy = "started_at"


@admin.register(RejectedRecord)
class RejectedRecordAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "source", "location", "reason", "excerpt"]
    list_filter = ["source"]
    search_fields = ["reason", "location"]


@admin.register(FileCheckpoint)
class FileCheckpointAdmin(ReadOnlyAdmin):
    list_display = ["path", "source", "size", "items_done", "complete", "updated_at"]
    list_filter = ["source", "complete"]


# --- Prometheus metrics --------------------------------------------------------------------------
from ingest.models import (  # noqa: E402  (appended section; kept apart from the usage admin above)
    GpuDevice,
    GpuInterval,
    InferenceInterval,
    InferenceSeries,
    MetricCheckpoint,
    PrometheusSource,
    UnmatchedSeries,
)


@admin.register(PrometheusSource)
class PrometheusSourceAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "enabled", "step_seconds", "last_success_at", "lag_seconds", "last_error"]
    list_filter = ["enabled"]
    search_fields = ["name", "url"]
    readonly_fields = ["created_at", "last_pull_at", "last_success_at", "lag_seconds", "last_error"]


@admin.register(MetricCheckpoint)
class MetricCheckpointAdmin(ReadOnlyAdmin):
    list_display = ["query_key", "source", "window_end", "updated_at"]
    list_filter = ["source"]


@admin.register(GpuDevice)
class GpuDeviceAdmin(ReadOnlyAdmin):
    list_display = [
        "hostname",
        "gpu_index",
        "device_key",
        "partition",
        "vendor",
        "gpu_model",
        "pool",
        "last_seen",
    ]
    list_filter = ["vendor", "pool"]
    search_fields = ["hostname", "device_key"]


@admin.register(GpuInterval)
class GpuIntervalAdmin(ReadOnlyAdmin):
    list_display = ["interval_start", "gpu", "pool", "step_seconds", "utilisation", "power_w", "energy_j"]
    list_filter = ["pool", "step_seconds"]
    date_hierarchy = "interval_start"


@admin.register(InferenceSeries)
class InferenceSeriesAdmin(ReadOnlyAdmin):
    list_display = ["model_name", "server", "source", "endpoint", "model", "labels_key"]
    list_filter = ["server", "source"]


@admin.register(InferenceInterval)
class InferenceIntervalAdmin(ReadOnlyAdmin):
    list_display = [
        "interval_start",
        "series",
        "prompt_tokens",
        "generation_tokens",
        "running_mean",
        "running_max",
    ]
    date_hierarchy = "interval_start"


@admin.register(UnmatchedSeries)
class UnmatchedSeriesAdmin(ReadOnlyAdmin):
    list_display = ["vendor", "labels_key", "source", "first_interval", "last_interval", "intervals"]
    list_filter = ["vendor", "source"]


@admin.register(TaskStart)
class TaskStartAdmin(ReadOnlyAdmin):
    # Where an operator looks when a task stopped being retried: its starts and the refusal reason.
    list_display = ["last_started_at", "name", "task_id", "starts", "worker", "refused"]
    list_filter = ["name"]
    search_fields = ["task_id", "refused"]
    date_hierarchy = "last_started_at"
