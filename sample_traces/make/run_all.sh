#!/usr/bin/env bash
# Record every torch.profiler scenario of this folder, one python process each.
# usage: sample_traces/make/run_all.sh OUTDIR [TARPREFIX]
#   writes OUTDIR/<scenario>.json.gz; with TARPREFIX, appends each trace as soon as it is
#   made to TARPREFIX1.tar (first five scenarios) or TARPREFIX2.tar (the rest), so that a run
#   cut short still returns what it made and no tar grows too large.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${1:?usage: run_all.sh OUTDIR [TARPREFIX]}
TAR=${2:-}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
SCENARIOS=${SCENARIOS:-"slow_loader cold_start cuda_graphs leak fp32_no_tc tf32 decode_b1 odd_shapes host_sync compiled compiled_reduce_overhead pageable_copies memory_bound host_sync_gpu_bound launch_bound_train dataloader_workers0 grad_scaler_fp16 healthy_gpu_bound cpu_preprocess_inside compile_cold memory_flat decode_graphs"}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
failed=""
k=0
for s in $SCENARIOS; do
  k=$((k + 1))
  echo "=== $s start $(date +%T)"
  t0=$(date +%s)
  lim=150
  [[ "$s" == compile* || "$s" == memory_bound || "$s" == decode_graphs ]] && lim=240
  if ! timeout "$lim" python3 "$HERE/$s.py" "$OUTDIR/$s.json.gz"; then
    failed="$failed $s"
    echo "=== $s FAILED"
  fi
  echo "=== $s took $(( $(date +%s) - t0 )) s"
  if [ -n "$TAR" ] && [ -f "$OUTDIR/$s.json.gz" ]; then
    tar rf "$TAR$(( k <= 5 ? 1 : 2 )).tar" -C "$OUTDIR" "$s.json.gz"
  fi
done
ls -la "$OUTDIR"
echo "=== failed:${failed:- none}"
