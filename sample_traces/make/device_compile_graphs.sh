#!/usr/bin/env bash
# One device session for the torch.compile reduce-overhead captures and the .nsys-rep check:
#   compiled_reduce_overhead.json.gz   (run_all.sh, SCENARIOS=compiled_reduce_overhead)
#   nsys_graphs_mixed.{nsys-rep,sqlite.gz}  (run_nsys.sh, ONLY=nsys_graphs_mixed)
#   rep_report.json, sqlite_report.json  (check_nsys_rep.sh on the .nsys-rep)
# and log.txt with everything printed. Run from the repository root with .carry/ carried:
# .carry/debs/*.deb (libdw1, libelf1: `apt-get download libdw1 libelf1`) and .carry/wheels
# (`pip download --python-version 3.12 --only-binary=:all: polars orjson click`; numpy and
# networkx come from the machine's torch venv).
# usage: sample_traces/make/device_compile_graphs.sh OUTDIR 2>&1 | tee OUTDIR.log
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: device_compile_graphs.sh OUTDIR}
mkdir -p "$OUT"
mkdir -p /tmp/libs && for f in .carry/debs/*.deb; do dpkg -x "$f" /tmp/libs; done
export LD_LIBRARY_PATH=/tmp/libs/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
export TORCHINDUCTOR_COMPILE_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== tool venv"
TORCH_SITE=$(python3 -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))')
{ python3 -m venv /tmp/tv && /tmp/tv/bin/pip install -q --no-index --find-links .carry/wheels \
    polars orjson click; } >/tmp/venv.log 2>&1 &
VENV=$!
W=/tmp/rec
SCENARIOS=compiled_reduce_overhead "$HERE/run_all.sh" "$W"
ONLY=nsys_graphs_mixed "$HERE/run_nsys.sh" "$W"
wait $VENV
echo "venv install exit status $?"
cat /tmp/venv.log
TA_PY=/tmp/tv/bin/python
SITE="$PWD:$TORCH_SITE"
if ! PYTHONPATH="$SITE" "$TA_PY" -c 'import polars, orjson, click'; then
  echo "no venv: unpacking the wheels into /tmp/tvsite for python3 instead"
  mkdir -p /tmp/tvsite
  python3 -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall("/tmp/tvsite") for w in sys.argv[1:]]' \
    .carry/wheels/*.whl
  TA_PY=python3
  SITE="$PWD:/tmp/tvsite:$TORCH_SITE"
fi
PYTHONPATH="$SITE" "$TA_PY" -c 'import sys, polars, orjson, click; print(sys.version, "polars", polars.__version__)'
ls -la "$W"
cp "$W"/compiled_reduce_overhead.json.gz "$W"/nsys_graphs_mixed.sqlite.gz \
  "$W"/nsys_graphs_mixed.nsys-rep "$OUT"/
echo "=== check_nsys_rep"
PYTHONPATH="$SITE" TA_PYTHON="$TA_PY" \
  "$HERE/check_nsys_rep.sh" "$W/nsys_graphs_mixed.nsys-rep" "$OUT"
echo "=== done"
