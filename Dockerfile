# nanovllm container image (first cut).
#
# Stage 1 builds with the CUDA devel image (nvcc + the CUDA runtime, which is
# linked statically); stage 2 holds only the binary and the shared libraries
# it needs, on the matching CUDA runtime image. The entrypoint is
# `nanovllm serve`; the model folder is mounted at /models:
#
#   docker build -t nanovllm .
#   docker run --gpus all -p 8000:8000 -v /path/to/Qwen3-0.6B:/models/Qwen3-0.6B:ro \
#       nanovllm --model /models/Qwen3-0.6B
#
# The HTTP server (`serve`) is not implemented yet; the image layout is the
# one it will ship in.
ARG CUDA_VERSION=13.0.1
ARG BUILD_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04
ARG RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04

FROM ${BUILD_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential libjansson-dev libopenblas-dev \
    libpcre2-dev libutf8proc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" build/nanovllm

FROM ${RUNTIME_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends libjansson4 libopenblas0-pthread libpcre2-8-0 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home nanovllm
# utf8proc's runtime package is named by its soname (libutf8proc2, 3, ...):
# take the library the binary was linked with instead of guessing the name.
COPY --from=build /usr/lib/x86_64-linux-gnu/libutf8proc.so.* /usr/lib/x86_64-linux-gnu/
COPY --from=build /src/build/nanovllm /usr/local/bin/nanovllm
USER nanovllm
EXPOSE 8000
ENTRYPOINT ["nanovllm", "serve"]
CMD ["--host", "0.0.0.0", "--port", "8000"]
