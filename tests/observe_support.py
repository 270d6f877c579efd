"""Shared by the observability tests: the train options of their training servers."""

from __future__ import annotations

TRAIN_OPTIONS = {"progress": "false", "batch_rule": "episodes", "batch_size": "2",
                 "group_size": "2", "checkpoint_every": "0", "checkpoint_on_stop": "false"}

