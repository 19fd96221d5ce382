#!/usr/bin/env bash
# A/B of source trees on a GPU machine, alternating in one session (figures from different leases
# or processes do not compare: docs/gpu.md "Testing").
#
#   scripts/gpu_ab.sh ROUNDS TREE.tar... -- COMMAND [ARG...]
#
# Each TREE.tar (made with `git archive REV -o DIR/NAME.tar`, DIR an ignored folder carried to the
# device) is extracted to /tmp/gpu_ab/NAME. Then, ROUNDS times, COMMAND runs once in each tree in
# turn, with that tree as the working directory and on PYTHONPATH, AB_LABEL=NAME and
# EMBER_CACHE_DIR=/tmp/gpu_ab/NAME.cache (so no tree reuses another's kernels); each output line is
# prefixed with "[NAME round R]". Example:
#   scripts/gpu_ab.sh 2 .ab/old.tar .ab/new.tar -- python3 benchmarks/tensorcore_bench.py \
#       --out /tmp/tc --paths wgmma --wg-ws= --cases fp16,bf16
# Exit status: non-zero when a command failed.
set -u
if [ $# -lt 4 ]; then
  sed -n '2,15p' "$0"; exit 2
fi
rounds=$1; shift
trees=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do trees+=("$1"); shift; done
[ "${1:-}" = "--" ] || { echo "gpu_ab: no -- before the command"; exit 2; }
shift
root=/tmp/gpu_ab
rc=0
for t in "${trees[@]}"; do
  name=$(basename "$t" .tar)
  rm -rf "$root/$name" && mkdir -p "$root/$name" && tar xf "$t" -C "$root/$name" || { echo "gpu_ab: cannot extract $t"; exit 2; }
done
for r in $(seq 1 "$rounds"); do
  for t in "${trees[@]}"; do
    name=$(basename "$t" .tar)
    (cd "$root/$name" && AB_LABEL=$name EMBER_CACHE_DIR=$root/$name.cache PYTHONPATH=$root/$name "$@" 2>&1) \
      | sed "s/^/[$name round $r] /"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  done
done
exit $rc
