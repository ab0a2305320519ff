"""Builders for ingestion tests: canonical JSONL lines and a database URL for subprocesses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import connection

BASE_TS = datetime(2026, 10, 31, 22, 0, tzinfo=UTC)


def canonical(i: int, **overrides) -> dict:
    """The i-th attempt of a steady stream: 3 teams, 2 workloads, 2 models, one per 37 s."""
    record = {
        "task_id": f"task-{i // 2}",
        "attempt": i % 2 + 1,
        "request_id": f"req-{i}",
        "ts": (BASE_TS + timedelta(seconds=37 * i)).isoformat().replace("+00:00", "Z"),
        "model": ["llama-3.1-70b-instruct-awq", "gpt-4o-mini"][i % 2],
        "endpoint": ["vllm-h100-a", "openai-gpt-4o-mini"][i % 2],
        "workload": ["summarize", "classify"][i % 3 % 2],
        "team": ["netops", "support", "search"][i % 3],
        "status": "failure" if i % 10 == 0 else "success",
        "http_status": 500 if i % 10 == 0 else 200,
        "latency_ms": 300 + i % 700,
        "ttft_ms": 40 + i % 60,
        "usage": {
            "prompt_tokens": 1000 + i % 500,
            "completion_tokens": 100 + i % 300,
            "total_tokens": 1100 + i % 500 + i % 300,
            "prompt_tokens_details": {"cached_tokens": i % 100},
        },
    }
    record.update(overrides)
    return record


def write_jsonl(path: Path, records: list[dict | str]) -> Path:
    with path.open("w") as handle:
        for record in records:
            handle.write((record if isinstance(record, str) else json.dumps(record)) + "\n")
    return path


def subprocess_database_url() -> str:
    """A DATABASE_URL for the test database, so a child ``manage.py`` writes where the test reads."""
    params = connection.get_connection_params()
    host = params.get("host", "")
    user = params.get("user", "")
    password = params.get("password", "")
    name = connection.settings_dict["NAME"]
    if host.startswith("/"):
        return f"postgres://{user}:{password}@/{name}?host={host}"
    return f"postgres://{user}:{password}@{host}:{params.get('port', 5432)}/{name}"
