# syntax=docker/dockerfile:1
# The operator image (also runs the SDC probe Jobs: python -m goodput_operator.probe).
# Stage 1 builds the wheel; stage 2 installs it into a slim runtime without build tools.
#   docker build -t ghcr.io/goodput-dev/goodput-operator:0.1.0 .
# BASE_IMAGE: any Debian/Ubuntu image with python3 (>= 3.11) and pip on PATH as `python` and
# `pip`; `make image` builds one from Debian's packages (goodput_operator/sandbox/operator_image.py)
ARG BASE_IMAGE=python:3.11.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir --upgrade pip build \
 && python -m build --wheel --outdir /dist

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="goodput-operator" \
      org.opencontainers.image.description="Topology-aware training and inference on accelerator clusters" \
      org.opencontainers.image.source="https://github.com/goodput-dev/goodput-operator"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY --from=build /dist/*.whl /tmp/
RUN pip install --no-cache-dir /tmp/*.whl && rm -f /tmp/*.whl \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin goodput
USER 65532:65532
EXPOSE 8080 8081 9090
ENTRYPOINT ["goodput-operator"]
