#!/usr/bin/env bash
# Record the pitfall scenarios of pitfalls.py, one python process each (see its docstring).
# usage: sample_traces/make/run_pitfalls.sh OUTDIR
#   writes OUTDIR/<scenario>.json.gz, OUTDIR/facts.d/<scenario>.log (everything it printed)
#   and $FACTS_OUT (default OUTDIR/facts_pitfalls.json): the FACT lines of every scenario run,
#   merged (re-written after each scenario, so a run cut short keeps what it made).
#   TARPREFIX=P appends each trace, as soon as it is made, to P1.tar (the allocator pair and
#   compile_dynamic_shapes), P2.tar (recompile_every_step alone: its size is the least known),
#   P3.tar (anomaly, item logging, checkpoint, slow steps, zero_grad_fill,
#   host_tensor_every_step) or P4.tar (the convs).
#   SCENARIOS="..." picks a subset (default: all those of the first set that write a trace, in
#   this order; conv_timing and dynamic_lengths_timing only time, and run when named).
#   SCENARIOS=pitfalls2 (or pitfalls2a / pitfalls2b: its compile+cuDNN and its conv/memory/
#   determinism halves) runs the second set: recompile_limit_hit, graph_breaks_per_step,
#   graph_breaks_none, cudnn_benchmark_new_shapes, cudnn_nobenchmark_new_shapes,
#   conv18_nchw_bf16, conv18_channels_last_bf16, conv18_nchw_fp32_notf32,
#   empty_cache_memory_profiled, allocator_steady_memory_profiled, deterministic_index_add
#   (and, named alone, deterministic_off_index_add: the twin, profiled with it off);
#   their traces go to P5.tar (compile), P6.tar (cuDNN, conv18) and P7.tar (memory,
#   deterministic). SCENARIOS=pitfalls3 runs the third set: ddp_accum_without_no_sync,
#   ddp_accum_with_no_sync (DDP on one process, NCCL, world_size 1), checkpoint_compiled,
#   compiled_no_checkpoint; their traces go to P8.tar (DDP) and P9.tar (compiled).
#   DEADLINE_S (default 540):
#   each scenario's timeout is cut so that the whole run ends by then; a scenario that would
#   get under 20 s is skipped. A failed scenario is reported and the run goes on.
#   PITFALLS_DRY=1 runs tiny sizes on the CPU (checks the scripts; no GPU).
# The recording (device tool, one H200, 2026-12-01; tests/data/gpu/README.md) took two commands:
#   FACTS_OUT=$OUT/facts_pitfalls.json TARPREFIX=$OUT/traces DEADLINE_S=535 \
#     bash sample_traces/make/run_pitfalls.sh /tmp/o 2>&1 | tee $OUT/log.txt        # 365 s
#   SCENARIOS="conv_timing dynamic_lengths_timing" FACTS_OUT=$OUT/facts_pitfalls_timing.json \
#     bash sample_traces/make/run_pitfalls.sh /tmp/o 2>&1 | tee $OUT/log_timing.txt  # 84 s
# and the two facts files were merged into tests/data/gpu/facts_pitfalls.json; the two added
# later (a third command, a fresh machine) were merged into it the same way:
#   SCENARIOS="zero_grad_fill host_tensor_every_step" FACTS_OUT=$OUT/facts_more.json \
#     TARPREFIX=$OUT/traces DEADLINE_S=380 bash sample_traces/make/run_pitfalls.sh /tmp/o
# The second set (2026-12-02, one H200; facts merged into facts_pitfalls2.json): three commands,
#   SCENARIOS=pitfalls2a FACTS_OUT=$OUT/facts_pitfalls2a.json TARPREFIX=$OUT/traces \
#     DEADLINE_S=505 bash sample_traces/make/run_pitfalls.sh /tmp/o                     # 198 s
#   SCENARIOS=pitfalls2b FACTS_OUT=$OUT/facts_pitfalls2b.json TARPREFIX=$OUT/tracesB \
#     DEADLINE_S=330 bash sample_traces/make/run_pitfalls.sh /tmp/o                     # 91 s
#   SCENARIOS=deterministic_off_index_add FACTS_OUT=$OUT/facts_pitfalls2c.json \
#     TARPREFIX=$OUT/tracesC DEADLINE_S=120 bash sample_traces/make/run_pitfalls.sh /tmp/o  # 35 s
# The third set (2026-12-02, one H200; facts_pitfalls3.json): one command,
#   SCENARIOS=pitfalls3 FACTS_OUT=$OUT/facts_pitfalls3.json TARPREFIX=$OUT/traces \
#     DEADLINE_S=555 bash sample_traces/make/run_pitfalls.sh /tmp/o > $OUT/log_pitfalls3.txt 2>&1  # 111 s
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${1:?usage: run_pitfalls.sh OUTDIR}
FACTS_OUT=${FACTS_OUT:-$OUTDIR/facts_pitfalls.json}
TARPREFIX=${TARPREFIX:-}
DEADLINE_S=${DEADLINE_S:-540}
PY=${PY:-python3}
mkdir -p "$OUTDIR/facts.d"
export PYTHONUNBUFFERED=1
START=$(date +%s)
SCENARIOS=${SCENARIOS:-"empty_cache_every_step allocator_steady recompile_every_step compile_dynamic_shapes anomaly_detection_on item_logging_per_layer conv_nchw_bf16 conv_channels_last_bf16 checkpoint_every_block slow_every_other_step zero_grad_fill host_tensor_every_step"}
P2A="recompile_limit_hit graph_breaks_per_step graph_breaks_none cudnn_benchmark_new_shapes cudnn_nobenchmark_new_shapes"
P3="ddp_accum_without_no_sync ddp_accum_with_no_sync checkpoint_compiled compiled_no_checkpoint"
P2B="conv18_nchw_bf16 conv18_channels_last_bf16 conv18_nchw_fp32_notf32 empty_cache_memory_profiled allocator_steady_memory_profiled deterministic_index_add"
case "$SCENARIOS" in
  pitfalls2) SCENARIOS="$P2A $P2B" ;;
  pitfalls2a) SCENARIOS="$P2A" ;;
  pitfalls2b) SCENARIOS="$P2B" ;;
  pitfalls3) SCENARIOS="$P3" ;;
esac
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if [ "${PITFALLS_DRY:-0}" != 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
fi
$PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
$PY -c 'import triton; print("triton", triton.__version__)' 2>/dev/null || echo "triton: not importable"
$PY -c 'import torchvision; print("torchvision", torchvision.__version__)' 2>/dev/null || echo "torchvision: not importable"

limit_of() {
  case "$1" in
    recompile_every_step) echo 220 ;;
    recompile_limit_hit|checkpoint_compiled) echo 200 ;;
    compiled_no_checkpoint) echo 130 ;;
    ddp_accum_*) echo 100 ;;
    graph_breaks_per_step|cudnn_benchmark_new_shapes) echo 160 ;;
    compile_dynamic_shapes) echo 130 ;;
    graph_breaks_none|cudnn_nobenchmark_new_shapes) echo 110 ;;
    anomaly_detection_on|conv_*|dynamic_lengths_timing) echo 110 ;;
    *) echo 80 ;;
  esac
}
tar_of() {
  case "$1" in
    empty_cache_every_step|allocator_steady|compile_dynamic_shapes) echo 1 ;;
    recompile_every_step) echo 2 ;;
    conv_*) echo 4 ;;
    recompile_limit_hit|graph_breaks_*) echo 5 ;;
    cudnn_*|conv18_*) echo 6 ;;
    *_memory_profiled|deterministic_*) echo 7 ;;
    ddp_accum_*) echo 8 ;;
    checkpoint_compiled|compiled_no_checkpoint) echo 9 ;;
    *) echo 3 ;;
  esac
}

merge() {
  $PY - "$OUTDIR/facts.d" "$FACTS_OUT" $SCENARIOS <<'EOF'
import json, os, sys
d, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
res = {"env": None, "scenarios": {}}
for s in names:
    log = os.path.join(d, s + ".log")
    if not os.path.exists(log):
        continue
    facts = []
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("FACT "):
                try:
                    facts.append(json.loads(line[5:]))
                except ValueError:
                    pass
    st = {}
    rcf = os.path.join(d, s + ".rc")
    if os.path.exists(rcf):
        rc, wall = open(rcf).read().split()
        st = {"rc": int(rc), "process_wall_s": int(wall)}
    truth = [f for f in facts if f.get("truth")]
    if res["env"] is None and facts and "torch" in facts[0]:
        res["env"] = {k: v for k, v in facts[0].items() if k != "scenario"}
    res["scenarios"][s] = {**st, "truth": truth[-1] if truth else None, "facts": facts}
with open(out, "w") as f:
    json.dump(res, f, indent=1, sort_keys=True)
EOF
}

failed=""
for s in $SCENARIOS; do
  left=$(( DEADLINE_S - ($(date +%s) - START) ))
  lim=$(limit_of "$s")
  (( lim > left - 5 )) && lim=$(( left - 5 ))
  if (( lim < 20 )); then
    echo "=== $s SKIPPED: only ${left} s left before the deadline"
    failed="$failed $s(skipped)"
    continue
  fi
  echo "=== $s start $(date +%T) (timeout ${lim} s)"
  t0=$(date +%s)
  set -o pipefail
  timeout "$lim" $PY "$HERE/pitfalls.py" "$s" "$OUTDIR" 2>&1 | tee "$OUTDIR/facts.d/$s.log"
  rc=$?
  set +o pipefail
  echo "$rc $(( $(date +%s) - t0 ))" > "$OUTDIR/facts.d/$s.rc"
  if [ "$rc" != 0 ]; then
    failed="$failed $s(rc=$rc)"
    echo "=== $s FAILED rc=$rc"
  fi
  echo "=== $s took $(( $(date +%s) - t0 )) s"
  if [ -n "$TARPREFIX" ] && [ -f "$OUTDIR/$s.json.gz" ]; then
    tar rf "$TARPREFIX$(tar_of "$s").tar" -C "$OUTDIR" "$s.json.gz"
  fi
  merge || echo "=== merge failed"
done
ls -la "$OUTDIR"
[ -n "$TARPREFIX" ] && ls -la "$TARPREFIX"*.tar 2>/dev/null
echo "=== total $(( $(date +%s) - START )) s; failed:${failed:- none}"
