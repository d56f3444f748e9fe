#!/usr/bin/env bash
# Submit a sharded needlepoint evaluation: an array of N shard jobs, then a merge job that waits
# for them. Usage: examples/slurm/submit.sh N  (settings in NP_* variables, see shard.sbatch).
# Prints the two job ids ("ARRAY_ID MERGE_ID"). Extra sbatch flags: NP_SBATCH_ARGS.
set -euo pipefail
N=${1:?usage: submit.sh N (the number of shards)}
: "${NP_RUNS:?set NP_RUNS}"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$NP_RUNS/logs"
# shellcheck disable=SC2086
array=$(sbatch --parsable --array=1-"$N" --export=ALL,NP_SHARDS="$N" --output="$NP_RUNS/logs/shard-%a.out" ${NP_SBATCH_ARGS:-} "$here/shard.sbatch")
array=${array%%;*}
# shellcheck disable=SC2086
merge=$(sbatch --parsable --dependency="${NP_MERGE_AFTER:-afterok}:$array" --output="$NP_RUNS/logs/merge.out" ${NP_SBATCH_ARGS:-} "$here/merge.sbatch")
echo "${array} ${merge%%;*}"
