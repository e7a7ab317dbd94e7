# Guardian's worker and simulator image (entrypoint `guardian`); `make docker` builds it, and
# docker-compose.yml runs it. Python 3.11 from the base image: python:3.11-slim by default, or Debian's
# python3 on a bare Debian base (BASE_IMAGE=..., what `make docker` uses where no registry answers).
#
# BuildKit is needed (DOCKER_BUILDKIT=1, the default of Docker 23+). pip may need a CA bundle to reach
# PyPI: give it as the build secret "pip_ca" (docker build --secret id=pip_ca,src=FILE); it is
# mounted for that one step and is in no layer of the image.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS python
RUN if ! command -v python3 >/dev/null; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            python3 python3-venv ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi

# ---- build: the project and its dependencies into a virtualenv, copied alone into the image
FROM python AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120 PIP_CACHE_DIR=/var/cache/pip
RUN python3 -m venv /opt/guardian
# the dependencies first: this layer is rebuilt only when pyproject.toml changes
COPY pyproject.toml /src/
RUN --mount=type=secret,id=pip_ca --mount=type=cache,target=/var/cache/pip \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('/src/pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /src/requirements.txt \
    && /opt/guardian/bin/pip install -r /src/requirements.txt
COPY README.md /src/
COPY config /src/config
COPY guardian /src/guardian
COPY topics /src/topics
COPY tables /src/tables
COPY pipeline /src/pipeline
COPY supervisor /src/supervisor
COPY streams /src/streams
COPY simulator /src/simulator
COPY report /src/report
COPY bench /src/bench
COPY chaos /src/chaos
COPY console /src/console
RUN --mount=type=secret,id=pip_ca --mount=type=cache,target=/var/cache/pip \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && /opt/guardian/bin/pip install --no-deps /src

# ---- the image
FROM python
COPY --from=build /opt/guardian /opt/guardian
ENV PATH=/opt/guardian/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GUARDIAN_DATA_DIR=/var/lib/guardian \
    GUARDIAN_WEB_HOST=0.0.0.0 \
    GUARDIAN_WEB_PORT=6066
RUN useradd --create-home --uid 10001 guardian \
    && mkdir -p /var/lib/guardian \
    && chown guardian /var/lib/guardian
USER guardian
WORKDIR /home/guardian
VOLUME ["/var/lib/guardian"]
EXPOSE 6066
# the worker's readiness (/ready: 200 once it has its partitions and their tables); the one-shot
# commands (topics create, simulate) exit before it matters
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GUARDIAN_WEB_PORT', '6066') + '/ready', timeout=4)"]
ENTRYPOINT ["guardian"]
CMD ["--help"]
