#!/usr/bin/env bash
# Record the issue-33 scenarios (a memory-bound run already at the HBM roof, hand-written GELU
# and LayerNorm with their fused fixes timed in the same process, start-up in a fresh process
# with and without ProfilerStep markers), one python process each; see issue33.py.
# usage: sample_traces/make/run_issue33.sh OUTDIR
#   writes OUTDIR/<scenario>.json.gz and OUTDIR/$FACTS_NAME (default facts_issue33.json), the
#   merged facts of the scenarios run (per-scenario facts go to $FACTS_DIR, default
#   OUTDIR/facts.d). SCENARIOS="..." picks a subset (default: all, in this order; the
#   startup_*_truth* processes time the start-up without the profiler in fresh processes, one
#   before and one after the profiled one, and write no trace).
# ISSUE33_DRY=1 runs tiny sizes on the CPU (no GPU needed; checks the script).
# The recording (device tool, 8 files back per command: the 7 traces + one tarball of the
# per-scenario facts and logs) took two commands on one H100 each (the second on a fresh
# machine, to repeat the start-up truth: 4 processes per start-up scenario in all):
#   FACTS_DIR=/tmp/f33 sample_traces/make/run_issue33.sh /tmp/o33       # 258 s wall
#   SCENARIOS="startup_steps_truth3 startup_steps_truth4 startup_nosteps_truth3 \
#     startup_nosteps_truth4" FACTS_DIR=/tmp/f33b sample_traces/make/run_issue33.sh /tmp/o33b
# and then (the merge uses no torch, but the script imports it):
#   python3 issue33.py --merge facts_issue33.json f33/facts_*.json f33b/facts_*.json
# The first process on a fresh machine that touches cuDNN loads its ~480 MB of libraries from
# a cold page cache: its iteration 1 takes ~5 s instead of ~1.2-1.6 s. The merge keeps such
# runs but leaves them out of the start-up median (see issue33.py, merge).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${1:?usage: run_issue33.sh OUTDIR}
FACTS_DIR=${FACTS_DIR:-$OUTDIR/facts.d}
FACTS_NAME=${FACTS_NAME:-facts_issue33.json}
PY=${PY:-python3}
mkdir -p "$OUTDIR" "$FACTS_DIR"
export PYTHONUNBUFFERED=1
SCENARIOS=${SCENARIOS:-"elementwise_roof gelu_manual gelu_fused layernorm_manual layernorm_fused startup_steps_truth startup_steps startup_steps_truth2 startup_nosteps_truth startup_nosteps startup_nosteps_truth2"}
if [ "${ISSUE33_DRY:-0}" != 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
fi
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
failed=""
for s in $SCENARIOS; do
  echo "=== $s start $(date +%T)"
  t0=$(date +%s)
  if ! timeout 200 $PY "$HERE/issue33.py" "$s" "$OUTDIR" "$FACTS_DIR"; then
    failed="$failed $s"
    echo "=== $s FAILED"
  fi
  echo "=== $s took $(( $(date +%s) - t0 )) s"
done
$PY "$HERE/issue33.py" --merge "$OUTDIR/$FACTS_NAME" "$FACTS_DIR"/facts_*.json
ls -la "$OUTDIR"
echo "=== failed:${failed:- none}"
