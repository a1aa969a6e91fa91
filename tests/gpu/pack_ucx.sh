#!/usr/bin/env bash
# Packs UCX with CUDA lanes for the GPU machine, which reaches no package index: the libucx-cu12
# wheel's libraries, headers and pkg-config files, without its static libraries and tools (43 MB
# as a wheel, about 6 MB this way; the device tool carries 64 MiB in all, mpich's wheel included).
# Run here, before the device run; tests/gpu/run.sh unpacks .whl/libucx-cu12.tar.gz.
#
#   tests/gpu/pack_ucx.sh [python]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m pip download --quiet --no-deps libucx-cu12 -d "$work"
"$PYTHON" -m zipfile -e "$work"/libucx_cu12-*.whl "$work/unpacked"
mkdir -p .whl
# The shared libraries once each (the wheel holds each name as a copy, not a link), UCX's modules
# (lib/ucx: CUDA, cross-memory attach), its headers and .pc files.
tar -czf .whl/libucx-cu12.tar.gz -C "$work/unpacked" \
  --exclude='*.a' --exclude='*.la' --exclude='libucx/bin' --exclude='*perftest*' \
  --exclude='libucx/lib/*.so' --exclude='libucx/lib/*.so.0.0.0' \
  --exclude='libucx/lib/ucx/*.so' --exclude='libucx/lib/ucx/*.so.0.0.0' \
  libucx
ls -l .whl/libucx-cu12.tar.gz
