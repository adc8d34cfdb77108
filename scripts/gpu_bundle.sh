#!/usr/bin/env bash
# gpu_bundle.sh - builds nanovllm and its test binary with CUDA and puts them,
# with the shared libraries they need that a GPU machine may lack, into
# gpu-bundle/ (git-ignored), for scripts/gpu_check.sh on a machine that has a
# GPU but none of our Debian packages (see docs/DESIGN.md, "The GPU checks").
#
#   scripts/gpu_bundle.sh        then carry gpu-bundle/ and run scripts/gpu_check.sh
#
# glibc, libstdc++ and libgcc_s stay out: the GPU machine's own are newer.
# cuBLAS stays out too: it is opened at run time from the machine's CUDA.
# Everything is packed into gpu-bundle/bundle.tar.xz (~13 MB instead of ~65:
# OpenBLAS alone is 36 MB), well inside what a device call may carry;
# scripts/gpu_check.sh unpacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
make -j"$(nproc)" CUDA=1 build/nanovllm build/test_nanovllm
rm -rf gpu-bundle
mkdir -p gpu-bundle/lib
cp build/nanovllm build/test_nanovllm gpu-bundle/
# Without their debug sections (a third of the pack): what a device call may
# carry is the working tree and the bundle together, 64 MiB.
strip --strip-debug gpu-bundle/nanovllm gpu-bundle/test_nanovllm
for bin in build/nanovllm build/test_nanovllm; do
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | grep -vE '^(libc|libm|libpthread|libdl|librt|libresolv|libstdc\+\+|libgcc_s|ld-linux[^ ]*)\.so' |
    while read -r soname path; do cp -L "$path" "gpu-bundle/lib/$soname"; done
tar -C gpu-bundle -cf - nanovllm test_nanovllm lib | xz -T0 -9e > gpu-bundle.tar.xz.tmp
rm -rf gpu-bundle
mkdir gpu-bundle
mv gpu-bundle.tar.xz.tmp gpu-bundle/bundle.tar.xz
du -sh gpu-bundle/bundle.tar.xz
# What a device call carries: the tracked and untracked-unignored files, and the bundle.
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 stat -c %s 2> /dev/null |
    awk '{s += $1} END {print s + 0}')
bundle=$(stat -c %s gpu-bundle/bundle.tar.xz)
echo "carried: tree $((tree / 1048576)) MiB + bundle $((bundle / 1048576)) MiB of 64 MiB"
if [ $((tree + bundle)) -gt $((60 * 1048576)) ]; then
    echo "gpu_bundle.sh: over 60 MiB: a device call would refuse or truncate it" >&2
    exit 1
fi
