"""SQL for the replay buffer of turn streams (`writegate.stream_events`)."""

from __future__ import annotations

INSERT_STREAM_EVENT_SQL = """
INSERT INTO writegate.stream_events (stream_id, seq, thread_id, event, data)
VALUES (%s, %s, %s, %s, %s::jsonb)
ON CONFLICT (stream_id, seq) DO NOTHING"""

SELECT_STREAM_AFTER_SQL = """
SELECT seq, event, data FROM writegate.stream_events
WHERE stream_id = %s AND thread_id = %s AND seq > %s
ORDER BY seq"""

STREAM_EXISTS_SQL = """
SELECT 1 FROM writegate.stream_events WHERE stream_id = %s AND thread_id = %s LIMIT 1"""

# A turn's first event prunes the streams older than the keep, in the same statement.
INSERT_FIRST_STREAM_EVENT_SQL = """
WITH pruned AS (
    DELETE FROM writegate.stream_events WHERE created_at < now() - make_interval(secs => %s)
)
INSERT INTO writegate.stream_events (stream_id, seq, thread_id, event, data)
VALUES (%s, %s, %s, %s, %s::jsonb)
ON CONFLICT (stream_id, seq) DO NOTHING"""
