#!/usr/bin/env bash
# Record the Nsight Systems scenarios (SQLite exports, gzipped), from process start.
# usage: sample_traces/make/run_nsys.sh OUTDIR
# nsys needs libdw.so.1: unpack libdw1 and libelf1 debs and put them on LD_LIBRARY_PATH
# (see ../shared/gpu-traces-howto.md); NSYS overrides the nsys binary; ONLY="name ..."
# records just those captures. After each export, nsysfacts.py prints FACT lines read back
# from it (plain SQL, no traceanalyzer code). nsys_graphs_mixed also leaves its report in
# OUTDIR/nsys_graphs_mixed.nsys-rep (KEEP_REP="name ..." keeps others' too), and runs with
# TORCHINDUCTOR_COMPILE_THREADS=1 (Inductor compiles in-process: no worker processes under
# nsys).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${1:?usage: run_nsys.sh OUTDIR}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
$N --version
TMP=$(mktemp -d)
failed=""
cap() {  # cap NAME "EXTRA NSYS OPTIONS" ARGS-OF-PYTHON...
  local name=$1 extra=$2
  shift 2
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
  echo "=== $name start $(date +%T)"
  local t0
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if timeout 240 "$N" profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none $extra \
      --force-overwrite=true -o "$TMP/$name" python3 "$@" &&
     timeout 120 "$N" export --type sqlite --force-overwrite=true -o "$TMP/$name.sqlite" "$TMP/$name.nsys-rep"; then
    gzip -9 -c "$TMP/$name.sqlite" >"$OUTDIR/$name.sqlite.gz"
    python3 "$HERE/nsysfacts.py" "$TMP/$name.sqlite" || echo "=== $name: nsysfacts failed"
    ls -la "$TMP/$name.sqlite" "$OUTDIR/$name.sqlite.gz"
    if [[ " ${KEEP_REP:-nsys_graphs_mixed} " == *" $name "* ]]; then
      cp "$TMP/$name.nsys-rep" "$OUTDIR/$name.nsys-rep"
      ls -la "$OUTDIR/$name.nsys-rep"
    fi
  else
    failed="$failed $name"
    echo "=== $name FAILED"
  fi
  echo "=== $name took $(( $(date +%s) - t0 )) s"
}
cap nsys_fp32_cold "" "$HERE/nsys_fp32_cold.py"
cap nsys_graphs_default "" "$HERE/cuda_graphs.py" --nsys
cap nsys_graphs_node "--cuda-graph-trace=node" "$HERE/cuda_graphs.py" --nsys
TORCHINDUCTOR_COMPILE_THREADS=1 cap nsys_graphs_mixed "" "$HERE/nsys_graphs_mixed.py"
cap nsys_host_sync "" "$HERE/nsys_host_sync.py"
cap nsys_launch_bound "" "$HERE/nsys_launch_bound.py"
cap nsys_slow_loader "" "$HERE/nsys_slow_loader.py"
echo "=== failed:${failed:- none}"
