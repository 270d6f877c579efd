"""The solver client: a plain OpenAI-client program, no swarmrl import.

It runs in its own process with its own dependencies (only `openai`): the
"isolated runtime" of the game. It watches a spool folder for questions; each
job names an episode's OpenAI-compatible base URL and per-episode key (from the
proposer's StartEpisode), so its call is recorded in that episode, under the
solver model. It writes the answer next to the job and never sees a reward.

    python examples/proposer_solver/solver.py --spool runs/two-models/spool
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai


def answer(job_path: Path, answers: Path, model: str, temperature: float) -> None:
    job = json.loads(job_path.read_text())
    client = openai.OpenAI(base_url=job["base_url"], api_key=job["api_key"], max_retries=3)
    try:
        reply = client.chat.completions.create(
            model=model, messages=job["messages"], max_tokens=4, temperature=temperature)
        result = {"answer": reply.choices[0].message.content or ""}
    except openai.OpenAIError as err:  # failures are data: the proposer aborts the episode
        result = {"error": repr(err)}
    tmp = answers / f".{job_path.name}.tmp"
    tmp.write_text(json.dumps(result))
    tmp.rename(answers / job_path.name)
    job_path.unlink()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spool", required=True, help="folder with jobs/ and answers/")
    p.add_argument("--model", default="solver")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--stop-file", help="exit once this file exists and no job is left")
    args = p.parse_args()
    jobs, answers = Path(args.spool) / "jobs", Path(args.spool) / "answers"
    jobs.mkdir(parents=True, exist_ok=True)
    answers.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    with ThreadPoolExecutor(args.workers) as pool:
        while True:
            new = [j for j in sorted(jobs.glob("*.json")) if j.name not in taken]
            for job in new:
                taken.add(job.name)
                pool.submit(answer, job, answers, args.model, args.temperature)
            if not new:
                if args.stop_file and os.path.exists(args.stop_file) and not any(jobs.glob("*.json")):
                    return
                time.sleep(0.01)


if __name__ == "__main__":
    main()
