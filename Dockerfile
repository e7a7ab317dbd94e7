# Guardian's worker and simulator image: `docker compose up` builds it (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GUARDIAN_DATA_DIR=/var/lib/guardian

WORKDIR /src
# only what the package needs (the build context also holds .venv, caches and outputs)
COPY pyproject.toml README.md ./
COPY config ./config
COPY guardian ./guardian
COPY topics ./topics
COPY tables ./tables
COPY pipeline ./pipeline
COPY supervisor ./supervisor
COPY streams ./streams
COPY simulator ./simulator
COPY report ./report
COPY bench ./bench
RUN pip install . && rm -rf /src/build

RUN useradd --create-home --uid 10001 guardian && mkdir -p /var/lib/guardian && chown guardian /var/lib/guardian
USER guardian
WORKDIR /home/guardian
VOLUME ["/var/lib/guardian"]

ENTRYPOINT ["guardian"]
CMD ["--help"]
