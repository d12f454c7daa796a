#!/usr/bin/env bash
# Record the hardware-counter captures (SET=counters) and the copies / cold-call / fusion / launch
# shape torch.profiler traces (SET=kineto) on one GPU machine; see each script's docstring.
# usage: SET=counters|kineto sample_traces/make/run_counters.sh OUTDIR
#   SET=counters (-> tests/data/counters/):
#     gpu_metrics_loops.py --time, then three Nsight Systems captures with GPU metrics
#       (nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --gpu-metrics-devices=all, from
#       process start; nsys export --type sqlite; countersfacts.py redact; gzip -9):
#       gemm_healthy, memory_bound_adds, one_block_kernel  -> OUTDIR/<name>.sqlite.gz
#       (a capture whose .sqlite.gz exceeds MAX_GZ bytes, default 5.3 MB, is recorded again with
#       --gpu-metrics-frequency=5000; the log and facts say so)
#     managed_memory.cu built with nvcc, timed (fault vs prefetch), then captured with
#       --cuda-um-cpu-page-faults=true --cuda-um-gpu-page-faults=true -> managed_memory.sqlite.gz
#     ncu_train_step.py under Nsight Compute (--nvtx --nvtx-include "step_1/", sections
#       SpeedOfLight, LaunchStats, Occupancy, the metrics below; a metric this ncu does not list
#       in --query-metrics is dropped and named in the log) -> ncu_train_step.ncu-rep,
#       ncu_train_step.csv.gz (--import --csv --page raw); then its timing and its Kineto twin
#       ncu_train_step_kineto.json.gz
#       ncu_train_step_full: the same with start/end ranges (ncu_train_step.py --startend,
#       --nvtx-include "step_1"), so that the backward's kernels (autograd's own thread) are in
#     facts: OUTDIR/facts_counters.json (countersfacts.py merge; tools.json: versions, uname)
#     ONLY="metrics managed managed_time ncu ncu_full" picks parts (default: all)
#   SET=kineto (-> tests/data/gpu/): launch_shapes.py one_block / gemm_healthy / small_batch
#     (launch_<name>.json.gz; facts_launch_shapes.json), copy_pageable_dtoh.py, cold_inference.py
#     (time twice, each a fresh process; trace in a third), gelu_sizes.py (three widths)
#     (facts_copies_cold.json)
#   OUTDIR/facts.d/<scenario>.log holds everything each scenario printed. DEADLINE_S (default
#   560): a step that would start with under 20 s left is skipped. nsys needs libdw.so.1:
#   CARRY (default .carry) holds libdw1 / libelf1 .debs (../shared/gpu-traces-howto.md).
# The recording (device tool, one H200, 2026-12-02): two commands,
#   SET=counters DEADLINE_S=545 ONLY="metrics managed ncu" bash sample_traces/make/run_counters.sh /tmp/o
#   SET=kineto DEADLINE_S=400 bash sample_traces/make/run_counters.sh /tmp/k; and in the same
#   command SET=counters ONLY="managed_time ncu_full" (the 30-step managed-memory timing and the
#   whole-step ncu capture, added after the first command had shown the need)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${1:?usage: SET=counters|kineto run_counters.sh OUTDIR}
SET=${SET:-counters}
DEADLINE_S=${DEADLINE_S:-560}
MAX_GZ=${MAX_GZ:-5300000}
CARRY=${CARRY:-.carry}
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
NCU=${NCU:-/opt/nvidia/nsight-compute/2025.3.1/ncu}
PY=${PY:-python3}
FD=$OUTDIR/facts.d
mkdir -p "$FD"
TMP=$(mktemp -d)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
START=$(date +%s)
failed=""

left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }

# run NAME LIMIT CMD...: append CMD's output to FD/NAME.log; FD/NAME.rc = "worst-rc seconds"
run() {
  local name=$1 lim=$2
  shift 2
  local l
  l=$(left)
  (( lim > l - 5 )) && lim=$(( l - 5 ))
  if (( lim < 20 )); then
    echo "=== $name SKIPPED ($* ): ${l} s left"
    failed="$failed $name(skipped)"
    return 1
  fi
  echo "=== $name: $* (timeout $lim s) $(date +%T)"
  local t0 rc prev=0 wall=0
  t0=$(date +%s)
  set -o pipefail
  timeout "$lim" "$@" 2>&1 | tee -a "$FD/$name.log"
  rc=$?
  set +o pipefail
  if [ -f "$FD/$name.rc" ]; then read -r prev wall <"$FD/$name.rc"; fi
  (( rc != 0 )) && prev=$rc
  echo "$prev $(( wall + $(date +%s) - t0 ))" >"$FD/$name.rc"
  if (( rc != 0 )); then
    failed="$failed $name(rc=$rc)"
    echo "=== $name FAILED rc=$rc"
  fi
  echo "=== $name took $(( $(date +%s) - t0 )) s"
  return $rc
}

tools() {
  mkdir -p /tmp/libs
  for f in "$CARRY"/*.deb; do [ -f "$f" ] && dpkg -x "$f" /tmp/libs; done
  export LD_LIBRARY_PATH=/tmp/libs/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  $PY - "$N" "$NCU" "$FD/tools.json" <<'EOF'
import json, platform, subprocess, sys
def out(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:
        return f"failed: {e}"
t = {"uname_r": platform.release(), "nsys": out([sys.argv[1], "--version"]),
     "ncu": out([sys.argv[2], "--version"]).splitlines()[-1:],
     "nvidia_smi": out(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem", "--format=csv,noheader"]),
     "nvcc": out(["bash", "-c", "n=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc); $n --version | tail -2"])}
try:
    import torch, triton
    t.update(torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(), triton=triton.__version__)
except Exception as e:
    t["torch"] = f"failed: {e}"
print(json.dumps(t, indent=1))
json.dump(t, open(sys.argv[3], "w"), indent=1)
EOF
}

# nsyscap NAME "EXTRA OPTIONS" CMD...: capture, export, redact, facts, gzip to OUTDIR/NAME.sqlite.gz
nsyscap() {
  local name=$1 extra=$2
  shift 2
  # shellcheck disable=SC2086
  run "$name" 200 "$N" profile -t cuda,nvtx --sample=none --cpuctxsw=none $extra \
      --force-overwrite=true -o "$TMP/$name" "$@" || return 1
  run "$name" 150 "$N" export --type sqlite --force-overwrite=true -o "$TMP/$name.sqlite" "$TMP/$name.nsys-rep" || return 1
  run "$name" 60 $PY "$HERE/countersfacts.py" redact "$TMP/$name.sqlite"
  run "$name" 90 $PY "$HERE/countersfacts.py" metrics "$TMP/$name.sqlite" "$name"
  (cd "$HERE" && run "$name" 90 $PY nsysfacts.py "$TMP/$name.sqlite")
  gzip -9 -c "$TMP/$name.sqlite" >"$OUTDIR/$name.sqlite.gz"
  ls -la "$TMP/$name.sqlite" "$OUTDIR/$name.sqlite.gz" | tee -a "$FD/$name.log"
  echo "FACT {\"scenario\": \"$name\", \"file\": \"$name.sqlite.gz\", \"bytes_gz\": $(stat -c %s "$OUTDIR/$name.sqlite.gz"), \"bytes_sqlite\": $(stat -c %s "$TMP/$name.sqlite"), \"nsys_options\": \"-t cuda,nvtx --sample=none --cpuctxsw=none $extra\"}" | tee -a "$FD/$name.log"
  rm -f "$TMP/$name.sqlite" "$TMP/$name.nsys-rep"
}

metrics_cap() {  # metrics_cap NAME: a gpu_metrics_loops capture, again at 5 kHz if too big
  local name=$1
  nsyscap "$name" "--gpu-metrics-devices=all" $PY "$HERE/gpu_metrics_loops.py" "$name" || return 1
  if (( $(stat -c %s "$OUTDIR/$name.sqlite.gz") > MAX_GZ )); then
    echo "=== $name: over $MAX_GZ bytes, again with --gpu-metrics-frequency=5000" | tee -a "$FD/$name.log"
    mv "$OUTDIR/$name.sqlite.gz" "$TMP/$name.10khz.sqlite.gz"
    mv "$FD/$name.log" "$FD/${name}_10khz_discarded.log"
    mv "$FD/$name.rc" "$FD/${name}_10khz_discarded.rc"
    if ! nsyscap "$name" "--gpu-metrics-devices=all --gpu-metrics-frequency=5000" $PY "$HERE/gpu_metrics_loops.py" "$name"; then
      mv "$TMP/$name.10khz.sqlite.gz" "$OUTDIR/$name.sqlite.gz"
    fi
  fi
}

want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

ncu_step() {  # ncu_step NAME NVTX-INCLUDE [SCRIPT-ARG]: ncu over step_1 -> NAME.csv.gz
  local name=$1 incl=$2 arg=${3:-}
  local want_m avail=() m metrics
  want_m="gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active sm__throughput.avg.pct_of_peak_sustained_elapsed gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed launch__grid_size launch__block_size launch__registers_per_thread sm__warps_active.avg.pct_of_peak_sustained_active sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
  [ -s "$TMP/ncu_query.txt" ] || timeout 60 "$NCU" --query-metrics >"$TMP/ncu_query.txt" 2>&1
  for m in $want_m; do
    if [[ $m == launch__* ]] || ! [ -s "$TMP/ncu_query.txt" ] || grep -q "^${m%%.*}[[:space:]]" "$TMP/ncu_query.txt"; then
      avail+=("$m")
    else
      echo "=== ncu: metric $m not listed by --query-metrics: dropped" | tee -a "$FD/$name.log"
    fi
  done
  metrics=$(IFS=,; echo "${avail[*]}")
  echo "FACT {\"scenario\": \"$name\", \"ncu_metrics\": \"$metrics\", \"nvtx_include\": \"$incl\", \"script_arg\": \"$arg\"}" | tee -a "$FD/$name.log"
  rm -f "$TMP/k.ncu-rep"
  # shellcheck disable=SC2086
  run "$name" 330 "$NCU" --nvtx --nvtx-include "$incl" --section SpeedOfLight --section LaunchStats \
      --section Occupancy --metrics "$metrics" -f -o "$TMP/k" $PY "$HERE/ncu_train_step.py" $arg
  if ! [ -f "$TMP/k.ncu-rep" ] && (( $(left) > 200 )); then
    echo "=== ncu: no report; again with --clock-control none and the time/DRAM metrics only" |
      tee -a "$FD/$name.log"
    # shellcheck disable=SC2086
    run "$name" 200 "$NCU" --nvtx --nvtx-include "$incl" --clock-control none \
        --section SpeedOfLight --section LaunchStats --section Occupancy \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        -f -o "$TMP/k" $PY "$HERE/ncu_train_step.py" $arg
  fi
  if [ -f "$TMP/k.ncu-rep" ]; then
    "$NCU" --import "$TMP/k.ncu-rep" --csv --page raw >"$TMP/$name.csv" 2>>"$FD/$name.log"
    run "$name" 60 $PY "$HERE/countersfacts.py" ncu "$TMP/$name.csv"
    gzip -9 -c "$TMP/$name.csv" >"$OUTDIR/$name.csv.gz"
    cp "$TMP/k.ncu-rep" "$OUTDIR/$name.ncu-rep"
    ls -la "$TMP/$name.csv" "$OUTDIR/$name".* | tee -a "$FD/$name.log"
  fi
}

counters() {
  uname -r
  if want metrics; then
    run gpu_metrics_loops_time 120 $PY "$HERE/gpu_metrics_loops.py" --time
    for s in gemm_healthy memory_bound_adds one_block_kernel; do metrics_cap "$s"; done
  fi
  # managed memory: nvcc build, timing, capture
  local nvcc
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if (want managed || want managed_time) &&
     run managed_memory 120 "$nvcc" -O2 -arch=sm_90 -o "$TMP/managed_memory" "$HERE/managed_memory.cu" -ldl; then
    run managed_memory 150 "$TMP/managed_memory" time
    want managed && nsyscap managed_memory "--cuda-um-cpu-page-faults=true --cuda-um-gpu-page-faults=true" "$TMP/managed_memory" capture
  fi
  # Nsight Compute: step_1 of the small GPT (push/pop range: the main thread's kernels), its
  # timing and Kineto twin; then the whole step_1 (start/end range: the backward's too)
  if want ncu; then
    ncu_step ncu_train_step "step_1/"
    run ncu_train_step 90 $PY "$HERE/ncu_train_step.py" --time
    run ncu_train_step 90 $PY "$HERE/ncu_train_step.py" --kineto "$OUTDIR/ncu_train_step_kineto.json.gz" &&
      (cd "$HERE" && run ncu_train_step 60 $PY -c "import sys, json, tracefacts; print('FACT ' + json.dumps({'scenario': 'ncu_train_step_kineto', 'trace_facts': tracefacts.trace_facts(sys.argv[1])}))" "$OUTDIR/ncu_train_step_kineto.json.gz")
  fi
  want ncu_full && ncu_step ncu_train_step_full "step_1" --startend
  $PY "$HERE/countersfacts.py" merge "$FD" "$OUTDIR/facts_counters.json" gpu_metrics_loops_time \
    gemm_healthy memory_bound_adds one_block_kernel managed_memory ncu_train_step ncu_train_step_full
}

kineto() {
  for s in one_block gemm_healthy small_batch; do
    run "launch_$s" 120 $PY "$HERE/launch_shapes.py" "$s" "$OUTDIR"
  done
  $PY "$HERE/countersfacts.py" merge "$FD" "$OUTDIR/facts_launch_shapes.json" launch_one_block \
    launch_gemm_healthy launch_small_batch
  run copy_pageable_dtoh 150 $PY "$HERE/copy_pageable_dtoh.py" "$OUTDIR"
  run cold_inference 60 $PY "$HERE/cold_inference.py" time
  run cold_inference 60 $PY "$HERE/cold_inference.py" time
  run cold_inference 90 $PY "$HERE/cold_inference.py" trace "$OUTDIR"
  run gelu_sizes 240 $PY "$HERE/gelu_sizes.py" "$OUTDIR"
  $PY "$HERE/countersfacts.py" merge "$FD" "$OUTDIR/facts_copies_cold.json" copy_pageable_dtoh \
    cold_inference gelu_sizes
}

tools
case "$SET" in
  counters) counters ;;
  kineto) kineto ;;
  *) echo "SET must be counters or kineto"; exit 2 ;;
esac
ls -la "$OUTDIR"
echo "=== total $(( $(date +%s) - START )) s; failed:${failed:- none}"
