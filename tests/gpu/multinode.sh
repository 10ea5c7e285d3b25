#!/usr/bin/env bash
# Several hosts on one 4-GPU machine: 4 ranks as 2 "hosts" of 2 GPUs, each rank seeing only
# its host's GPUs and its local rank (OMPI_COMM_WORLD_LOCAL_RANK), NCCL forced onto its
# network transport, running configs/regress/gpu4_two_hosts.yaml against 1-GPU `simple`.
#   BUILD=build-gpu bash tests/gpu/multinode.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build-gpu}
dl="$(pwd)/$build/apps/driftless"
[ "$(nvidia-smi -L | wc -l)" -ge 4 ] || { echo "multinode: needs 4 GPUs, skipped"; exit 0; }
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
real_mpirun=$(command -v mpirun)
# Per rank: host = rank / 2, its two GPUs, local rank = rank % 2, its own NCCL host id.
cat >"$shim/as_host" <<'SH'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:?not under mpirun}
host=$((r / 2))
export OMPI_COMM_WORLD_LOCAL_RANK=$((r % 2)) CUDA_VISIBLE_DEVICES="$((2 * host)),$((2 * host + 1))"
export NCCL_HOSTID="fakehost$host"
exec "$@"
SH
# `driftless regress` runs `mpirun -np N <options> <driftless> train ...`: put as_host before
# the binary.
cat >"$shim/mpirun" <<SH
#!/usr/bin/env bash
args=()
while [ \$# -gt 0 ] && [ "\$1" != "$dl" ]; do args+=("\$1"); shift; done
exec "$real_mpirun" "\${args[@]}" -x NCCL_SHM_DISABLE=1 -x NCCL_P2P_DISABLE=1 \
  -x NCCL_NVLS_ENABLE=0 "$shim/as_host" "\$@"
SH
chmod +x "$shim/as_host" "$shim/mpirun"
PATH="$shim:$PATH" "$dl" regress --config configs/regress/gpu4_two_hosts.yaml \
  --output "$build/runs/gpu4_two_hosts"
