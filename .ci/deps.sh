#!/usr/bin/env bash
# Installs the Debian (bookworm) packages gradmesh needs when they are missing,
# or, when not root, prints the exact apt-get line and fails.
#   .ci/deps.sh          build + test dependencies (python3-torch is the reference
#                        that tests/unit/test_vs_torch.c and the benchmarks compare with,
#                        python3-torchvision the one tests/unit/test_families.c and
#                        tools/torchvision_weights.py use, and with python3-pil the photo
#                        transforms' reference and tests/tools/make_photos.py's image writer;
#                        openvpn and iputils-ping for the namespace testbed,
#                        tests/integration/netns.bash; systemd and man-db for the unit
#                        and man page checks, prometheus and curl for the metrics test)
#   .ci/deps.sh bench    the same, plus what only the benchmarks' peers need
#                        (OpenMPI for bench/allreduce.sh)
#   .ci/deps.sh systemd  the same, plus what `make test-systemd` boots machines with
#                        (debootstrap, systemd-container's systemd-nspawn)
set -euo pipefail

pkgs=(gcc make pkg-config clang libclang-rt-14-dev
      libopenblas-dev libinih-dev zlib1g-dev libpng-dev libjpeg-dev
      libssl-dev libsodium-dev libuv1-dev libjansson-dev libsystemd-dev libmicrohttpd-dev libraft-dev
      openssl iproute2 systemd man-db groff-base prometheus curl
      openvpn iputils-ping
      python3 python3-numpy python3-pil python3-torch python3-torchvision dataset-fashion-mnist)
if [ "${1:-}" = bench ]; then
    pkgs+=(openmpi-bin libopenmpi-dev)
fi
if [ "${1:-}" = systemd ]; then
    pkgs+=(debootstrap systemd-container)
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -gt 0 ]; then
    line="apt-get install -y --no-install-recommends ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "gradmesh: missing Debian packages; run as root:" >&2
        echo "  apt-get update && $line" >&2
        exit 1
    fi
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Python reader of our checkpoints (PyPI: safetensors) and TensorBoard's event reader
# (PyPI: tensorboard; Debian has no package) for the tests, in the python3 first on PATH.
# Debian's own numpy/torch live under /usr/bin/python3.
if ! python3 -c 'import safetensors.numpy, numpy, tensorboard.backend.event_processing.event_accumulator' 2>/dev/null; then
    echo "deps: pip install safetensors numpy tensorboard"
    python3 -m pip install -q safetensors numpy tensorboard 2>&1 | grep -v -i 'warning: running pip as' || true
    python3 -c 'import safetensors.numpy, numpy, tensorboard.backend.event_processing.event_accumulator'
fi
