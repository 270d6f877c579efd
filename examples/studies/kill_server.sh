#!/bin/bash
# Injects a server crash into a running study: SIGKILLs run RUN's server once its trainer
# has reported STEP steps (pick a STEP after a checkpoint, to watch the run resume from it).
#
#   examples/studies/kill_server.sh runs/studies/rg-lora/runs/s0-r01 8
set -euo pipefail
run=${1:?usage: kill_server.sh RUN_DIR STEP}
step=${2:?usage: kill_server.sh RUN_DIR STEP}
until [ "$(cat "$run/data/metrics.jsonl" 2>/dev/null | wc -l)" -ge "$step" ]; do sleep 5; done
pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['processes']['server']['pid'])" \
      "$run/run.json")
echo "$(date -u +%FT%TZ) SIGKILL server pid $pid of $run at step $step"
kill -9 "$pid"
