"""The store's tables, and bringing a data dir written by an older server up to date.

`prepare(conn)` is all the store runs on open: create what is missing, migrate, and
rebuild the training queue of episodes ended before it existed. Every step is
idempotent, so a data dir can be opened by any later server any number of times.
"""

from __future__ import annotations

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    client_name TEXT NOT NULL,
    lease_s REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    group_id TEXT NOT NULL,
    agent_version TEXT NOT NULL,
    models TEXT NOT NULL,
    labels TEXT NOT NULL,
    state TEXT NOT NULL,
    start_time REAL NOT NULL,
    start_request_id TEXT NOT NULL,
    end_request_id TEXT NOT NULL DEFAULT '',
    reward REAL,
    end_time REAL,
    abort_reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS episodes_state ON episodes(state);
CREATE TABLE IF NOT EXISTS calls (
    call_id TEXT PRIMARY KEY,
    episode_id TEXT NOT NULL REFERENCES episodes(episode_id),
    seq INTEGER NOT NULL,
    model TEXT NOT NULL,
    prompt_ids BLOB NOT NULL,
    completion_ids BLOB NOT NULL,
    logprobs BLOB NOT NULL,
    policy_version INTEGER NOT NULL,
    finish_reason TEXT NOT NULL,
    temperature REAL NOT NULL,
    text TEXT NOT NULL,
    request_id TEXT NOT NULL,
    parent_call_id TEXT NOT NULL,
    reward REAL,
    created_at REAL NOT NULL,
    chat_json TEXT NOT NULL,
    constrained INTEGER NOT NULL DEFAULT 0,
    top_logprobs TEXT NOT NULL DEFAULT '',
    version_spans TEXT NOT NULL DEFAULT '',
    grammar TEXT NOT NULL DEFAULT '',
    UNIQUE (episode_id, seq)
);
CREATE INDEX IF NOT EXISTS calls_request ON calls(episode_id, request_id);
CREATE TABLE IF NOT EXISTS consumed (
    episode_id TEXT NOT NULL,
    model TEXT NOT NULL,
    step INTEGER NOT NULL,
    PRIMARY KEY (episode_id, model)
);
CREATE TABLE IF NOT EXISTS episode_models (
    episode_id TEXT NOT NULL REFERENCES episodes(episode_id),
    model TEXT NOT NULL,
    reward REAL,
    queued INTEGER NOT NULL DEFAULT 0,
    num_calls INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (episode_id, model)
);
CREATE INDEX IF NOT EXISTS episode_models_queue ON episode_models(model, queued);
CREATE TABLE IF NOT EXISTS consumed_log (
    episode_id TEXT NOT NULL,
    model TEXT NOT NULL,
    step INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS recoveries (
    model TEXT NOT NULL,
    checkpoint_step INTEGER NOT NULL,
    lost_from INTEGER NOT NULL,
    lost_to INTEGER NOT NULL,
    retrained_episodes INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS policy_versions (
    model TEXT NOT NULL,
    version INTEGER NOT NULL,
    step INTEGER NOT NULL,
    lost INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    PRIMARY KEY (model, version)
);
CREATE TABLE IF NOT EXISTS events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL
);
"""


def _migrate(conn: sqlite3.Connection) -> None:
    """Brings a data dir written by an older server up to date (idempotent): owners on
    sessions and episodes (stores without them had one anonymous owner, ""),
    StartEpisode request ids unique per owner rather than server-wide, and the
    calls' `constrained` flag, `top_logprobs`, `version_spans` and `grammar`."""
    for table in ("sessions", "episodes"):
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if "owner" not in columns:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
    calls = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
    if "constrained" not in calls:  # from before constrained decoding: none were
        conn.execute("ALTER TABLE calls ADD COLUMN constrained INTEGER NOT NULL DEFAULT 0")
    if "top_logprobs" not in calls:  # from before they were kept: none were
        conn.execute("ALTER TABLE calls ADD COLUMN top_logprobs TEXT NOT NULL DEFAULT ''")
    if "version_spans" not in calls:  # from before spans: '' reads as one span
        conn.execute("ALTER TABLE calls ADD COLUMN version_spans TEXT NOT NULL DEFAULT ''")
    if "grammar" not in calls:  # from before grammars were kept: '' trains as context
        conn.execute("ALTER TABLE calls ADD COLUMN grammar TEXT NOT NULL DEFAULT ''")
    conn.execute("DROP INDEX IF EXISTS episodes_start_request")
    conn.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS episodes_owner_start_request "
        "ON episodes(owner, start_request_id) WHERE start_request_id != ''"
    )


# Rows of `episode_models`: one per (episode, model the episode lists). `reward` is the
# model's own reward (NULL: the episode's reward applies). `queued` = 1 puts the episode
# in that model's training queue; it is set for every model of an episode in the same
# transaction that ends the episode, so the trainers see it all together or not at all.

# Rebuilds the queue of episodes ended before the queue existed (idempotent).
_BACKFILL_QUEUE = """
INSERT OR IGNORE INTO episode_models (episode_id, model, reward, queued, num_calls)
SELECT e.episode_id, j.value, NULL, 1,
       (SELECT COUNT(*) FROM calls c WHERE c.episode_id = e.episode_id AND c.model = j.value)
FROM episodes e, json_each(e.models) j
WHERE e.state = 'ended'
  AND NOT EXISTS (SELECT 1 FROM episode_models q WHERE q.episode_id = e.episode_id AND q.queued = 1)
"""


def prepare(conn: sqlite3.Connection) -> None:
    """Creates the tables, migrates older ones and backfills the queue (idempotent)."""
    conn.executescript(SCHEMA)
    _migrate(conn)
    conn.execute(_BACKFILL_QUEUE)
