"""The console's settings: the environment (``GUARDIAN_CONSOLE_*``), where its flags win."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from config.settings import SettingsError

HOST_DEFAULT: Final = "127.0.0.1"
PORT_DEFAULT: Final = 8765
MAX_EXPERIENCES_DEFAULT: Final = 1000
RECORDS_PER_EXPERIENCE_DEFAULT: Final = 300


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number from {low} to {high}, not {text!r}") from None
    if not low <= value <= high:
        raise SettingsError(f"{name} must be a whole number from {low} to {high}, not {text!r}")
    return value


@dataclass(frozen=True)
class ConsoleSettings:
    host: str
    port: int
    workers: tuple[str, ...]
    max_experiences: int
    records_per_experience: int

    @classmethod
    def from_env_and_args(
        cls, args: argparse.Namespace, env: Mapping[str, str] | None = None
    ) -> ConsoleSettings:
        env = os.environ if env is None else env
        workers = args.worker or [u for u in env.get("GUARDIAN_CONSOLE_WORKERS", "").split(",") if u.strip()]
        for url in workers:
            if not url.strip().startswith(("http://", "https://")):
                raise SettingsError(f"a worker URL must start with http:// or https://, not {url!r}")
        return cls(
            host=args.host or env.get("GUARDIAN_CONSOLE_HOST", "").strip() or HOST_DEFAULT,
            port=args.port
            if args.port is not None
            else _int(env, "GUARDIAN_CONSOLE_PORT", PORT_DEFAULT, 0, 65535),
            workers=tuple(u.strip() for u in workers),
            max_experiences=args.max_experiences
            or _int(env, "GUARDIAN_CONSOLE_MAX_EXPERIENCES", MAX_EXPERIENCES_DEFAULT, 10, 1_000_000),
            records_per_experience=args.records_per_experience
            or _int(
                env, "GUARDIAN_CONSOLE_RECORDS_PER_EXPERIENCE", RECORDS_PER_EXPERIENCE_DEFAULT, 10, 100_000
            ),
        )
