#!/usr/bin/env bash
# Check `traceanalyzer report RUN.nsys-rep` against nsys for real, on a machine with nsys:
#   1. the report of the .nsys-rep (the tool runs `nsys export` into a temporary folder)
#      equals the report of the SQLite export made by hand, apart from the input's path;
#   2. nothing is written beside the .nsys-rep (its folder is listed before and after);
#   3. the same through NSYS=... instead of --nsys; then nsys without libdw.so.1 on
#      LD_LIBRARY_PATH (2025.3.1's `export` does not need it: it still works) and a truncated
#      report (a clear error naming nsys's reason).
# usage: sample_traces/make/check_nsys_rep.sh RUN.nsys-rep OUTDIR
#   run from the repository root, with a python (TA_PYTHON, default python3) that has the
#   tool's dependencies; NSYS names the nsys binary. Writes OUTDIR/rep_report.json and
#   OUTDIR/sqlite_report.json.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REP=${1:?usage: check_nsys_rep.sh RUN.nsys-rep OUTDIR}
OUTDIR=${2:?usage: check_nsys_rep.sh RUN.nsys-rep OUTDIR}
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
PY=${TA_PYTHON:-python3}
mkdir -p "$OUTDIR"
W=$(mktemp -d)
mkdir -p "$W/rep" "$W/byhand" "$W/env"
cp "$REP" "$W/rep/run.nsys-rep"
listing() { (cd "$1" && find . -printf '%p %s %TY-%Tm-%Td %TT\n' | sort); }
echo "=== 1. report on the .nsys-rep with --nsys"
listing "$W/rep" >"$W/before.txt"
cat "$W/before.txt"
t0=$(date +%s%N)
"$PY" -m traceanalyzer report "$W/rep/run.nsys-rep" --nsys "$N" --format json \
  -o "$OUTDIR/rep_report.json"
rc=$?
echo "exit status $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
listing "$W/rep" >"$W/after.txt"
if diff "$W/before.txt" "$W/after.txt"; then
  echo "folder of the .nsys-rep unchanged"
else
  echo "FOLDER OF THE .nsys-rep CHANGED"
fi
ls -la /tmp | grep -i traceanalyzer || echo "no traceanalyzer-* temporary folder left in /tmp"
echo "=== 2. the export by hand (the command the tool runs), nsys's own output"
"$N" export --type sqlite --force-overwrite true --output "$W/byhand/run.sqlite" \
  "$W/rep/run.nsys-rep"
echo "exit status $?"
ls -la "$W/byhand"
"$PY" -m traceanalyzer report "$W/byhand/run.sqlite" --format json \
  -o "$OUTDIR/sqlite_report.json"
echo "exit status $?"
"$PY" "$HERE/compare_reports.py" "$OUTDIR/rep_report.json" "$OUTDIR/sqlite_report.json"
echo "compare exit status $?"
echo "=== 3. NSYS=... in the environment instead of --nsys"
cp "$REP" "$W/env/run.nsys-rep"
NSYS="$N" "$PY" -m traceanalyzer report "$W/env/run.nsys-rep" --format json -o "$W/env.json"
echo "exit status $?"
"$PY" "$HERE/compare_reports.py" "$W/env.json" "$OUTDIR/rep_report.json" | tail -1
ls -la "$W/env"
echo "=== 4. LD_LIBRARY_PATH without libdw.so.1 (which nsys profile needs)"
env -u LD_LIBRARY_PATH "$PY" -m traceanalyzer report "$W/rep/run.nsys-rep" --nsys "$N" \
  --format json -o "$W/nolib.json"
echo "exit status $?"
echo "=== 5. a truncated report (first 100 KB)"
head -c 100000 "$REP" >"$W/rep/cut.nsys-rep"
"$PY" -m traceanalyzer report "$W/rep/cut.nsys-rep" --nsys "$N" --format json -o "$W/cut.json"
echo "exit status $?"
echo "--- nsys itself on the truncated report:"
"$N" export --type sqlite --force-overwrite true --output "$W/cut.sqlite" "$W/rep/cut.nsys-rep"
echo "exit status $?"
listing "$W/rep"
