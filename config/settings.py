"""Settings from the environment (docs/CONTRACTS.md §13); flags may override them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypeVar

SupervisorBackend = Literal["rules", "gemini"]
Language = Literal["ko", "en"]
_N = TypeVar("_N", int, float)

DEFAULT_GEMINI_MODEL = "gemini-2.5-flash"
#: the spellings of an on/off setting (unset or empty: off)
_FLAGS = {"": False, "0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}


class SettingsError(ValueError):
    """A setting has a value Guardian cannot use; the message names the variable and the fix."""


def _number(env: Mapping[str, str], name: str, default: str, kind: type[_N], what: str) -> _N:
    """The setting ``name`` parsed as ``kind``, or a :class:`SettingsError` saying what it must be."""
    raw = env.get(name, default)
    try:
        return kind(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be {what}, not {raw!r}") from exc


def _default_data_dir(env: Mapping[str, str]) -> Path:
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "guardian"


@dataclass(frozen=True)
class Settings:
    """Everything a Guardian process is configured with."""

    bootstrap: str | None
    topic_prefix: str
    partitions: int
    data_dir: Path
    supervisor: SupervisorBackend
    gemini_model: str
    language: Language
    #: the observation contracts and capability catalog (default: the ones shipped in ``topics``)
    contracts_file: Path | None = None
    capabilities_file: Path | None = None
    #: how often a worker prunes dedup keys older than the dedup window
    dedup_sweep_s: float = 60.0
    #: a worker's web server (``/healthz``, ``/ready``, ``/metrics``): port (0: off) and address
    web_port: int = 6066
    web_host: str = "127.0.0.1"
    #: a worker not ready (assigned, tables recovered) this long, with no recovery progress, says
    #: what it lacks (once per wait) and keeps trying
    ready_timeout_s: float = 60.0
    #: an input partition with records past its committed offset and no fetch or commit progress
    #: this long, while the pipeline waits for input, is stalled: healed in the process
    stall_after_s: float = 15.0
    #: a static member (a worker given its ID) removes itself from the consumer group when it
    #: stops, so its partitions move at once (a scale-down), instead of keeping them for the
    #: session timeout (a restart under the same ID takes them back with no rebalance)
    leave_on_stop: bool = False
    #: behind a backlog, how long a worker's table writes may wait so that a device's state is
    #: written once for several of its records (0: written with every flush)
    defer_state_s: float = 2.0
    #: a snapshot of the experience claims is written to the claims topic every this many records
    claims_snapshot_every: int = 50_000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        partitions = _number(env, "GUARDIAN_PARTITIONS", "8", int, "a whole number")
        if partitions < 1:
            raise SettingsError("GUARDIAN_PARTITIONS must be at least 1")
        supervisor = env.get("GUARDIAN_SUPERVISOR", "rules")
        if supervisor not in ("rules", "gemini"):
            raise SettingsError(f"GUARDIAN_SUPERVISOR must be 'rules' or 'gemini', not {supervisor!r}")
        dedup_sweep_s = _number(env, "GUARDIAN_DEDUP_SWEEP_S", "60", float, "a number of seconds")
        language = env.get("GUARDIAN_LANGUAGE", "ko")
        if language not in ("ko", "en"):
            raise SettingsError(f"GUARDIAN_LANGUAGE must be 'ko' or 'en', not {language!r}")
        web_port = _number(env, "GUARDIAN_WEB_PORT", "6066", int, "a port number")
        if not 0 <= web_port <= 65535:
            raise SettingsError(f"GUARDIAN_WEB_PORT must be between 0 (off) and 65535, not {web_port}")
        ready_timeout_s = _number(env, "GUARDIAN_READY_TIMEOUT_S", "60", float, "a number of seconds")
        if ready_timeout_s <= 0:
            raise SettingsError("GUARDIAN_READY_TIMEOUT_S must be more than 0")
        stall_after_s = _number(env, "GUARDIAN_STALL_AFTER_S", "15", float, "a number of seconds")
        if not stall_after_s > 0:
            raise SettingsError(f"GUARDIAN_STALL_AFTER_S must be more than 0, not {stall_after_s:g}")
        leave = env.get("GUARDIAN_LEAVE_ON_STOP", "").strip().lower()
        if leave not in _FLAGS:
            raise SettingsError(f"GUARDIAN_LEAVE_ON_STOP must be 1 or 0 (true or false), not {leave!r}")
        defer_state_s = _number(env, "GUARDIAN_DEFER_STATE_S", "2", float, "a number of seconds")
        if not 0 <= defer_state_s <= 60:
            raise SettingsError(
                f"GUARDIAN_DEFER_STATE_S must be between 0 (off) and 60, not {defer_state_s:g}"
            )
        snapshot_every = _number(env, "GUARDIAN_CLAIMS_SNAPSHOT_EVERY", "50000", int, "a whole number")
        if snapshot_every < 10:
            raise SettingsError(f"GUARDIAN_CLAIMS_SNAPSHOT_EVERY must be at least 10, not {snapshot_every}")
        data_dir = Path(env["GUARDIAN_DATA_DIR"]) if env.get("GUARDIAN_DATA_DIR") else _default_data_dir(env)
        return cls(
            bootstrap=env.get("GUARDIAN_KAFKA_BOOTSTRAP") or None,
            topic_prefix=env.get("GUARDIAN_TOPIC_PREFIX", "guardian."),
            partitions=partitions,
            data_dir=data_dir.expanduser(),
            supervisor=supervisor,  # type: ignore[arg-type]
            gemini_model=env.get("GUARDIAN_GEMINI_MODEL", DEFAULT_GEMINI_MODEL),
            language=language,  # type: ignore[arg-type]
            contracts_file=Path(env["GUARDIAN_CONTRACTS_FILE"])
            if env.get("GUARDIAN_CONTRACTS_FILE")
            else None,
            dedup_sweep_s=dedup_sweep_s,
            web_port=web_port,
            web_host=env.get("GUARDIAN_WEB_HOST") or "127.0.0.1",
            ready_timeout_s=ready_timeout_s,
            stall_after_s=stall_after_s,
            leave_on_stop=_FLAGS[leave],
            defer_state_s=defer_state_s,
            claims_snapshot_every=snapshot_every,
            capabilities_file=(
                Path(env["GUARDIAN_CAPABILITIES_FILE"]) if env.get("GUARDIAN_CAPABILITIES_FILE") else None
            ),
        )

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with the given fields replaced (flags win over the environment)."""
        clean = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **clean)  # type: ignore[arg-type]

    @property
    def kafka_dir(self) -> Path:
        """Where the local broker keeps its jars, config, data and logs."""
        return self.data_dir / "kafka"

    @property
    def tables_dir(self) -> Path:
        """Where the faust worker keeps its RocksDB tables."""
        return self.data_dir / "worker"

    def resolve_bootstrap(self) -> str:
        """The broker address: the configured one, else the running local broker's."""
        if self.bootstrap:
            return self.bootstrap
        marker = self.kafka_dir / "bootstrap"
        if marker.is_file():
            return marker.read_text(encoding="utf-8").strip()
        raise SettingsError(
            "no Kafka broker configured: run 'guardian kafka up', or set GUARDIAN_KAFKA_BOOTSTRAP "
            "to an existing cluster (or 'docker compose up -d kafka' and "
            "GUARDIAN_KAFKA_BOOTSTRAP=127.0.0.1:9092)"
        )
