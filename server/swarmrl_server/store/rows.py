"""Records as SQLite rows and back: the `calls` and `episodes` tables' column order, token
ids as uint32 and logprobs as float32 blobs (`array`), JSON for lists and maps.

Pure functions: the queries that read and write the rows live in `store.sqlite`'s parts
(`store.episodes`, `store.calls`, ...).
"""

from __future__ import annotations

import array
import json
from collections.abc import Iterable
from typing import Any

from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState


def _ids_to_blob(ids: Iterable[int]) -> bytes:
    return array.array("I", ids).tobytes()


def _blob_to_ids(blob: bytes) -> list[int]:
    out = array.array("I")
    out.frombytes(blob)
    return out.tolist()


def _floats_to_blob(values: Iterable[float]) -> bytes:
    return array.array("f", values).tobytes()


def _blob_to_floats(blob: bytes) -> list[float]:
    out = array.array("f")
    out.frombytes(blob)
    return out.tolist()


CALL_COLUMNS = (
    "call_id, episode_id, seq, model, prompt_ids, completion_ids, logprobs, policy_version, "
    "finish_reason, temperature, text, request_id, parent_call_id, reward, created_at, "
    "chat_json, constrained, top_logprobs, version_spans, grammar"
)
"""The `calls` columns in the order `call_row` writes and `call_from_row` reads them, named
because a migrated table's physical order is the order its columns were added in."""
INSERT_CALL = f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({', '.join('?' * 20)})"


def call_row(call: CallRecord) -> tuple[Any, ...]:
    """A call as a row of the `calls` table (columns in `CALL_COLUMNS` order)."""
    return (
        call.call_id, call.episode_id, call.seq, call.model,
        _ids_to_blob(call.prompt_ids), _ids_to_blob(call.completion_ids),
        _floats_to_blob(call.logprobs), call.policy_version, call.finish_reason,
        call.temperature, call.text, call.request_id, call.parent_call_id,
        call.reward, call.created_at, call.chat_json, int(call.constrained),
        json.dumps(call.top_logprobs) if call.top_logprobs else "",
        json.dumps(call.spans()), call.grammar,
    )




def call_from_row(r: tuple[Any, ...]) -> CallRecord:
    """A row of the `calls` table (SELECT `CALL_COLUMNS`) as a record."""
    return CallRecord(
        call_id=r[0], episode_id=r[1], seq=r[2], model=r[3],
        prompt_ids=_blob_to_ids(r[4]), completion_ids=_blob_to_ids(r[5]),
        logprobs=_blob_to_floats(r[6]), policy_version=r[7], finish_reason=r[8],
        temperature=r[9], text=r[10], request_id=r[11], parent_call_id=r[12],
        reward=r[13], created_at=r[14], chat_json=r[15], constrained=bool(r[16]),
        top_logprobs=[[(int(t), float(lp)) for t, lp in alts]
                      for alts in json.loads(r[17])] if r[17] else [],
        version_spans=[(int(v), int(a), int(b)) for v, a, b in json.loads(r[18])] if r[18] else [],
        grammar=r[19],
    )


def episode_from_row(
    row: tuple[Any, ...], calls: list[CallRecord], num_calls: int,
    model_rewards: dict[str, float],
) -> EpisodeRecord:
    """A row of the `episodes` table as a record, with what other tables hold of it."""
    (episode_id, session_id, task_id, group_id, agent_version, models, labels, state,
     start_time, start_request_id, end_request_id, reward, end_time,
     abort_reason, owner) = row
    return EpisodeRecord(
        episode_id=episode_id, session_id=session_id, task_id=task_id, group_id=group_id,
        agent_version=agent_version, models=json.loads(models), labels=json.loads(labels),
        state=EpisodeState(state), start_time=start_time,
        start_request_id=start_request_id, end_request_id=end_request_id, reward=reward,
        end_time=end_time, abort_reason=abort_reason, num_calls=num_calls, calls=calls,
        owner=owner, model_rewards=model_rewards,
    )
