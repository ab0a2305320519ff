"""The raw attempts table, partitioned by month of ``ts`` (monthly partitions are created on
demand and ahead of time by ``ingest.partitions``). Column order puts 8-byte columns first so
rows pack without alignment padding."""

from django.db import migrations

CREATE = """
CREATE TABLE ingest_attempt (
    ts timestamptz NOT NULL,
    key_hash bigint NOT NULL,
    task_hash bigint NOT NULL,
    source_id integer NOT NULL,
    team_id integer,
    workload_id integer,
    model_id integer NOT NULL,
    endpoint_id integer,
    error_type_id integer,
    prompt_tokens integer NOT NULL,
    completion_tokens integer NOT NULL,
    cached_tokens integer NOT NULL,
    reasoning_tokens integer,
    latency_ms integer,
    ttft_ms integer,
    queue_wait_ms integer,
    attempt smallint NOT NULL,
    http_status smallint,
    succeeded boolean NOT NULL,
    task_id text NOT NULL,
    PRIMARY KEY (source_id, key_hash, ts)
) PARTITION BY RANGE (ts);
CREATE INDEX ingest_attempt_ts_brin ON ingest_attempt USING brin (ts);
"""


class Migration(migrations.Migration):
    dependencies = [("ingest", "0001_initial")]

    operations = [
        migrations.RunSQL(CREATE, reverse_sql="DROP TABLE ingest_attempt CASCADE;"),
    ]
