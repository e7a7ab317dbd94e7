"""The faust App and its settings: nothing else lives here (agents are in ``streams.agents``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config.settings import Settings
from streams.seam import membership
from streams.seam.transport import SeamApp

#: "commit every N acks" set past any count reached between two timer commits
COMMIT_EVERY_NEVER = 1_000_000_000


class GuardianApp(SeamApp):
    """faust's App on the seam's eager transport (``streams.seam``)."""


def app_id(settings: Settings) -> str:
    """The consumer group and table-topic namespace: one per topic prefix."""
    return f"{settings.topic_prefix}worker"


def create_app(
    settings: Settings,
    *,
    bootstrap: str,
    worker_id: str = "w0",
    web_port: int | None = None,
    web_host: str = "127.0.0.1",
    instance_id: str | None = None,
) -> GuardianApp:
    """A faust App on ``bootstrap`` with RocksDB tables under the data dir (one folder per worker);
    with ``web_port``, faust's web server on ``web_host:web_port`` (health, readiness, metrics);
    with ``instance_id``, a static member of its consumer group (``streams.seam.membership``)."""
    datadir = Path(settings.tables_dir) / worker_id
    datadir.parent.mkdir(parents=True, exist_ok=True)
    web: dict[str, Any] = {"web_enabled": False}
    if web_port is not None:
        web = {
            "web_enabled": True,
            "web_port": web_port,
            "web_bind": web_host,
            "web_host": web_host,
        }
    if instance_id is not None:
        # faust's assignor checks that an assignment names the worker's canonical URL (by default
        # its web host and port): the one a static member is given back on a restart was made for
        # the member before it, so the URL must be the instance's own (``streams.seam.membership``)
        web["canonical_url"] = membership.canonical_url(instance_id)
    return GuardianApp(
        app_id(settings),
        broker=f"kafka://{bootstrap}",
        store="rocksdb://",
        datadir=str(datadir),
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        topic_allow_declare=True,
        # no leader-election topic: nothing here runs "on the leader only", and every topic the
        # worker subscribes to exists before it joins the group (``streams.admin.create_topics``)
        topic_disable_leader=True,
        autodiscover=False,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger_ms=10,
        producer_max_batch_size=256 * 1024,
        # offsets are committed by faust's commit timer only (every broker_commit_interval), in a
        # task of its own: a commit every N acks runs inside faust's fetch loop, which then hands
        # nothing to the pipeline while the producer is flushed and the coordinator answers
        broker_commit_every=COMMIT_EVERY_NEVER,
        broker_commit_interval=1.0,
        stream_buffer_maxsize=8192,
        stream_wait_empty=False,
        table_standby_replicas=0,
        broker_request_timeout=60.0,
        broker_session_timeout=30.0,
        # a member learns of a rebalance at its next heartbeat: every second, so the partitions of
        # a worker that leaves (or joins) move within about a second, not three
        broker_heartbeat_interval=1.0,
        consumer_group_instance_id=instance_id,
        # how long the producer retries a batch before the worker gives up on it (and stops, so
        # that the partitions' next owner reads its records again): Kafka's own default
        # delivery.timeout.ms, so a worker rides through a broker outage of up to two minutes; at
        # 60 s a worker with a batch in flight stopped in the chaos run's 70 s outage (seed 103)
        producer_request_timeout=120.0,
        **web,
    )
