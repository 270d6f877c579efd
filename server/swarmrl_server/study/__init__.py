"""Studies: many training runs laid out in one file, supervised, healed, compared, reported.

- `schema`: the study file (YAML) as pydantic models, and its variations expanded into runs;
- `commands`: one run's server and client command lines;
- `state`: what survives a killed `swarmrl study run` (one JSON file per run, written
  atomically, and the study's own file);
- `watch`: reading a run's metrics, its stop rules and budgets;
- `supervisor`: one run's processes: start, health, restarts with backoff, stop;
- `ray_jobs`: the same supervisor as a Ray job per run (`--ray-address`);
- `planner`: after each stage, a Python function or an OpenAI-compatible model proposes
  the next variations;
- `report`: Markdown, HTML and PNG from the runs' state and metrics;
- `cli`: ``swarmrl study run | status | report``.
"""
