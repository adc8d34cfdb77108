# nanovllm container images: one Dockerfile, two flavours.
#
#   CUDA (default): built on NVIDIA's CUDA 13 devel image, run on the matching
#   runtime image (the CUDA runtime is linked statically; the driver comes
#   from the host with --gpus all).
#     docker build -t nanovllm .
#     docker run --gpus all -p 8000:8000 -v /path/to/Qwen3-0.6B:/models/Qwen3-0.6B:ro \
#         nanovllm --model /models/Qwen3-0.6B
#
#   CPU: Debian bookworm for both stages, no CUDA.
#     docker build -t nanovllm:cpu --build-arg CUDA=0 \
#         --build-arg BUILD_IMAGE=debian:bookworm --build-arg RUNTIME_IMAGE=debian:bookworm .
#
# The runtime stage holds the binary and the shared libraries it links
# (found with ldd in the build stage, glibc excepted), so it needs no
# distribution-specific package names. The entrypoint is `nanovllm serve` on
# 0.0.0.0:$NANOVLLM_PORT (8000); any other serve flag (--api-key,
# --max-model-len, ...) goes after the image name. It runs as an unprivileged user; mount models
# read-only under /models. `make docker-test` builds and tests the CPU flavour
# with podman.
ARG CUDA=1
ARG CUDA_VERSION=13.0.1
ARG BUILD_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04
ARG RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04

FROM ${BUILD_IMAGE} AS build
ARG CUDA
LABEL org.nanovllm.stage=build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential libjansson-dev libopenblas-dev libxxhash-dev \
      libuv1-dev libpcre2-dev libutf8proc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" CUDA=${CUDA} build/nanovllm \
 && mkdir -p /out/lib \
 && cp build/nanovllm /out/ \
 && ldd build/nanovllm | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' \
    | grep -vE '^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[^ ]*)\.so' \
    | while read -r soname path; do cp -L "$path" "/out/lib/$soname"; done

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/lib/ /usr/local/lib/nanovllm/
COPY --from=build /out/nanovllm /usr/local/bin/nanovllm
RUN echo /usr/local/lib/nanovllm > /etc/ld.so.conf.d/nanovllm.conf && ldconfig \
 && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin nanovllm \
 && nanovllm --help > /dev/null
USER nanovllm
# serve and the HEALTHCHECK both take their port from here: change the
# container's port with -e NANOVLLM_PORT=..., not with --port.
ENV NANOVLLM_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 CMD ["nanovllm", "health"]
ENTRYPOINT ["nanovllm", "serve", "--host", "0.0.0.0"]
