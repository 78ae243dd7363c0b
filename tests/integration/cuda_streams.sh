#!/usr/bin/env bash
# The CUDA backend's stream discipline, read from the source (no GPU needed; the review of
# issue 22 found two breaches of it that a first GPU run could only show as flakes or as
# lost speed):
#  1. nothing runs on the legacy (NULL) stream: the compute, copy and upload streams are
#     cudaStreamNonBlocking, so they are not ordered against it.  No cudaMemset, cudaMemcpy
#     (the synchronous, NULL-stream forms) or cudaDeviceSynchronize in train/, and every
#     kernel launch names its stream (<<<grid, block, shared, stream>>>);
#  2. the per-step op table does not stall the host: train/nn/ops_cuda.c and
#     train/kernels/layers.cu call neither gm_cuda_copy / gm_cuda_sync (which wait for the
#     stream) nor cudaStreamSynchronize.  Only the loss and the hash (custom.cu) bring a
#     result to the host, and wait for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail=0
# code lines only: drop lines that are inside or start a comment
code() { grep -nE "$1" "${@:2}" | grep -vE '^[^:]+:[0-9]+:\s*(/?\*|//)' || true; }

mapfile -t srcs < <(find train -name '*.c' -o -name '*.cu' -o -name '*.h')
hits=$(code '\bcuda(Memset|Memcpy|Memcpy2D|Memcpy3D|DeviceSynchronize)\s*\(' "${srcs[@]}")
if [ -n "$hits" ]; then
    echo "FAIL: legacy-stream calls (use the Async form on cu->compute):"
    echo "$hits"
    fail=1
else
    echo "ok: no cudaMemset / cudaMemcpy / cudaDeviceSynchronize in train/"
fi

n=0
while IFS= read -r line; do
    n=$((n + 1))
    # <<<a, b, c, d>>>: four arguments (commas at the top level of the launch bracket)
    args=$(sed -E 's/.*<<<(.*)>>>.*/\1/' <<<"$line" | sed -E 's/\([^()]*\)//g' | tr -cd ',' | wc -c)
    if [ "$args" -ne 3 ]; then
        echo "FAIL: a launch without its stream: $line"
        fail=1
    fi
done < <(code '<<<' train/kernels/*.cu)
[ "$n" -gt 0 ] || { echo "FAIL: no kernel launch found in train/kernels/*.cu"; exit 1; }
echo "ok: $n kernel launches, each on a named stream"

hits=$(code '\b(gm_cuda_copy|gm_cuda_sync|cudaStreamSynchronize|cudaEventSynchronize)\s*\(' \
    train/nn/ops_cuda.c train/kernels/layers.cu)
if [ -n "$hits" ]; then
    echo "FAIL: the op table waits for the GPU:"
    echo "$hits"
    fail=1
else
    echo "ok: train/nn/ops_cuda.c and layers.cu never wait for the stream"
fi
exit $fail
