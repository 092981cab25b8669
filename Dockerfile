# seglog's image: one image for the gateway and the storage node (the command picks the
# service: seglog-gateway or seglog-storage-node). Builds with docker or podman (make image).
#
# BASE_IMAGE: any Debian-like image with python3 (3.11+) and venv; the official slim image by
# default. `make image` on a machine that reaches no registry imports one built with
# debootstrap instead.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The C modules (records/_scan.c, records/_encode.c) need a compiler and Python's headers;
# the gRPC code is generated from proto/. Neither the compiler nor grpcio-tools reaches the runtime stage.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && if ! python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))'; then \
        apt-get install -y --no-install-recommends python3-dev; fi \
    && rm -rf /var/lib/apt/lists/*
# A host whose TLS goes through its own CA mounts that bundle and names it (never copied in).
ARG PIP_CERT=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY libs ./libs
COPY services ./services
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip install grpcio-tools==1.85.1 \
    && mkdir -p libs/seglog/v1 \
    && /opt/build/bin/python -m grpc_tools.protoc -Iproto --python_out=libs --pyi_out=libs \
        --grpc_python_out=libs proto/seglog/v1/*.proto \
    && touch libs/seglog/v1/__init__.py \
    && /opt/build/bin/pip wheel --wheel-dir /wheels .

FROM ${BASE_IMAGE} AS runtime
ARG PIP_CERT=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# Copied, not bind-mounted: a build cache keys a COPY on the files' contents but a RUN's bind
# mount on nothing, so new sources reused a cached install of old ones (and a re-run with the
# build stage cached found nothing to mount). The wheels' layer is the price.
COPY --from=build /wheels /tmp/wheels
RUN python3 -m venv /opt/seglog \
    && /opt/seglog/bin/pip install --no-index --find-links /tmp/wheels seglog \
    && useradd --system --uid 10001 --home-dir /var/lib/seglog --create-home seglog
ENV PATH=/opt/seglog/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SEGLOG_DATA_DIR=/var/lib/seglog/data
USER 10001
WORKDIR /var/lib/seglog
# Gateway: 7070 clients, 7090 the storage nodes' (internal) listener. Storage node: 7071
# its API, 7072 the bulk fetch port.
EXPOSE 7070 7071 7072 7090
# SIGTERM: a node moves its leaderships away (controlled shutdown), flushes and closes its
# logs; Kubernetes' terminationGracePeriodSeconds leaves room for that.
STOPSIGNAL SIGTERM
CMD ["seglog-gateway", "--listen", "0.0.0.0:7070"]
