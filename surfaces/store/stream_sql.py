"""SQL for the replay buffer of turn streams (`writegate.stream_events`)."""

from __future__ import annotations

# A batch of one stream's events: one JSON array of {"seq", "event", "data"} objects,
# its `data` the event's own JSON as sent (no array of texts to escape element by element).
INSERT_STREAM_EVENTS_SQL = """
INSERT INTO writegate.stream_events (stream_id, seq, thread_id, event, data)
SELECT %(stream)s, e.seq, %(thread)s, e.event, e.data
FROM jsonb_to_recordset(%(batch)s::jsonb) AS e(seq integer, event text, data jsonb)
ON CONFLICT (stream_id, seq) DO NOTHING"""

SELECT_STREAM_AFTER_SQL = """
SELECT seq, event, data FROM writegate.stream_events
WHERE stream_id = %s AND thread_id = %s AND seq > %s
ORDER BY seq"""

STREAM_EXISTS_SQL = """
SELECT 1 FROM writegate.stream_events WHERE stream_id = %s AND thread_id = %s LIMIT 1"""

# A stream's first batch prunes the streams older than the keep, in the same statement.
INSERT_FIRST_STREAM_EVENTS_SQL = f"""
WITH pruned AS (
    DELETE FROM writegate.stream_events
    WHERE created_at < now() - make_interval(secs => %(keep_s)s)
){INSERT_STREAM_EVENTS_SQL}"""
