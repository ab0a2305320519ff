"""Admin for ingestion: sources are edited here; runs, rejects and checkpoints are read-only."""

from __future__ import annotations

from django.contrib import admin

from ingest.models import FileCheckpoint, IngestRun, RejectedRecord, Source


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
