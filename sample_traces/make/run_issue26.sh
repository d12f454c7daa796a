#!/usr/bin/env bash
# Record the issue-26 scenarios (FLOPs, achieved TFLOP/s, MFU, unfused attention, fused
# optimizer, batch-1 decoding), one python process each; see issue26.py for what each runs.
# usage: sample_traces/make/run_issue26.sh OUTDIR
#   writes OUTDIR/<scenario>.json.gz and OUTDIR/$FACTS_NAME (default facts_issue26.json),
#   the merged facts of the scenarios run (per-scenario facts go to $FACTS_DIR, default
#   OUTDIR/facts.d). SCENARIOS="..." picks a subset (default: all eleven, in this order).
# The device tool brings back 8 files per command, so the recording took three commands
# (the third re-made the two optimizer traces after their timing was changed to alternating
# rounds plus optimizer.step() alone; its facts replace the second command's for them):
#   SCENARIOS="gemm_loop_bf16 gemm_loop_fp8 gemm_loop_tf32 gpt_flops decode_greedy_b1" \
#     FACTS_DIR=/tmp/f26 FACTS_NAME=facts_issue26_a.json run_issue26.sh $OUT
#   SCENARIOS="gpt_flops attn_unfused_T1024 attn_unfused_T2048 attn_sdpa_T1024 attn_sdpa_T2048 optimizer_unfused optimizer_fused" \
#     FACTS_DIR=/tmp/f26 FACTS_NAME=facts_issue26_b.json run_issue26.sh $OUT
#   SCENARIOS="optimizer_unfused optimizer_fused" \
#     FACTS_DIR=/tmp/f26c FACTS_NAME=facts_issue26_c.json run_issue26.sh $OUT
# and then, here (later files win): python3 issue26.py --merge facts_issue26.json \
#     facts_issue26_a.json facts_issue26_b.json facts_issue26_c.json
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${1:?usage: run_issue26.sh OUTDIR}
FACTS_DIR=${FACTS_DIR:-$OUTDIR/facts.d}
FACTS_NAME=${FACTS_NAME:-facts_issue26.json}
mkdir -p "$OUTDIR" "$FACTS_DIR"
export PYTHONUNBUFFERED=1
SCENARIOS=${SCENARIOS:-"gemm_loop_bf16 gemm_loop_fp8 gemm_loop_tf32 gpt_flops decode_greedy_b1 attn_unfused_T1024 attn_unfused_T2048 attn_sdpa_T1024 attn_sdpa_T2048 optimizer_unfused optimizer_fused"}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "triton", triton.__version__)'
python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>/dev/null || echo "transformers: not installed"
failed=""
for s in $SCENARIOS; do
  echo "=== $s start $(date +%T)"
  t0=$(date +%s)
  if ! timeout 200 python3 "$HERE/issue26.py" "$s" "$OUTDIR" "$FACTS_DIR"; then
    failed="$failed $s"
    echo "=== $s FAILED"
  fi
  echo "=== $s took $(( $(date +%s) - t0 )) s"
done
python3 "$HERE/issue26.py" --merge "$OUTDIR/$FACTS_NAME" "$FACTS_DIR"/facts_*.json
ls -la "$OUTDIR"
echo "=== failed:${failed:- none}"
