"""A local single-node Apache Kafka broker (KRaft) for development, demos and tests (docs/CONTRACTS.md §13).

The broker is the real Apache Kafka server, run with the machine's Java (17 or newer). Its jars come
from Maven Central through ``mvn dependency:copy-dependencies`` and a small POM shipped with this
package (``kafka-broker.pom``); they are fetched once into a cache shared by every data dir:
``$XDG_CACHE_HOME/guardian/kafka-<version>/libs`` (``GUARDIAN_KAFKA_JARS`` overrides it).

One combined broker+controller node with a static voter, bound to 127.0.0.1 on free ports chosen
before its ``server.properties`` is written (``GUARDIAN_KAFKA_PORT`` fixes the client port). Config,
data, PID file, log and the ``bootstrap`` file live under ``Settings.kafka_dir``.

Environment read here (besides the settings):

- ``GUARDIAN_KAFKA_JARS``: the jar folder (default: the shared cache above);
- ``GUARDIAN_KAFKA_PORT``: a fixed client port (default: a free one, kept across restarts);
- ``GUARDIAN_MAVEN_ARGS``: extra ``mvn`` arguments, e.g. ``-o -Dmaven.repo.local=DIR``;
- ``JAVA_HOME``: the Java to use (default: ``java`` on ``PATH``).

This module owns ``LocalBroker``, the node's life cycle (up, down, restart); the node's folder, ports
and configuration are ``guardian.kafka_node``, its jars ``guardian.kafka_jars``, its Java
``guardian.kafka_java``, and ``guardian kafka ...`` is ``guardian.kafka_cmd``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import functools
import os
import shlex
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import IO, Any, TypeVar

from config.settings import Settings
from guardian.kafka_error import WAYS_OUT, BrokerError, say
from guardian.kafka_host import (
    HOST,
    atomic_write,
    free_port,
    port_accepts,
    port_is_free,
    read_cmdline,
    tail,
)
from guardian.kafka_jars import (
    COMPLETE_MARKER,
    KAFKA_VERSION,
    MVN_TIMEOUT_S,
    POM_RESOURCE,
    SCALA_VERSION,
    default_jars_dir,
)
from guardian.kafka_java import MIN_JAVA
from guardian.kafka_node import DEFAULT_HEAP, JAVA_TOOL_TIMEOUT_S, LOG4J2_PROPERTIES, KafkaNode, Ports

#: what importers take from here (much of it defined in the modules above and re-exported)
__all__ = [
    "COMPLETE_MARKER",
    "DEFAULT_HEAP",
    "DEFAULT_STOP_TIMEOUT_S",
    "DEFAULT_UP_TIMEOUT_S",
    "HOST",
    "JAVA_TOOL_TIMEOUT_S",
    "KAFKA_VERSION",
    "LOCK_TIMEOUT_S",
    "LOG4J2_PROPERTIES",
    "MIN_JAVA",
    "MVN_TIMEOUT_S",
    "POM_RESOURCE",
    "SCALA_VERSION",
    "WAYS_OUT",
    "BrokerError",
    "LocalBroker",
    "Ports",
    "default_jars_dir",
    "free_port",
    "port_is_free",
    "run_sync",
]

DEFAULT_UP_TIMEOUT_S = 60.0
DEFAULT_STOP_TIMEOUT_S = 30.0
LOCK_TIMEOUT_S = 30.0

_T = TypeVar("_T")


def run_sync(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine to completion from sync code, also when the caller is inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


class LocalBroker(KafkaNode):
    """One local Kafka node under ``kafka_dir`` (config/, data/, logs/, kafka.pid, bootstrap).

    ``up`` fetches the jars if needed, formats storage once, starts the JVM detached and waits until
    a client's metadata request succeeds; ``down`` stops exactly the process it started.
    """

    @classmethod
    def from_settings(cls, settings: Settings, env: Mapping[str, str] | None = None) -> LocalBroker:
        """The broker of ``settings.kafka_dir``, with GUARDIAN_KAFKA_JARS/PORT and GUARDIAN_MAVEN_ARGS."""
        env = dict(os.environ if env is None else env)
        port_raw = env.get("GUARDIAN_KAFKA_PORT", "").strip()
        port: int | None = None
        if port_raw:
            try:
                port = int(port_raw)
            except ValueError:
                port = -1
            if not 0 < port < 65536:
                raise BrokerError(f"GUARDIAN_KAFKA_PORT must be a TCP port number, not {port_raw!r}")
        return cls(
            settings.kafka_dir,
            jars_dir=default_jars_dir(env),
            port=port,
            mvn_args=shlex.split(env.get("GUARDIAN_MAVEN_ARGS", "")),
            env=env,
        )

    # ------------------------------------------------------------- life cycle

    @contextlib.contextmanager
    def _locked(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """One ``up``/``down``/``restart`` at a time per data dir (another process may be starting it)."""
        self.kafka_dir.mkdir(parents=True, exist_ok=True)
        with (self.kafka_dir / ".lock").open("a+b") as handle:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    if time.monotonic() > deadline:
                        raise BrokerError(
                            f"another 'guardian kafka' command holds {self.kafka_dir / '.lock'} for over "
                            f"{timeout_s:.0f} s: wait for it, or stop it"
                        ) from exc
                    time.sleep(0.1)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def up(self, timeout_s: float = DEFAULT_UP_TIMEOUT_S) -> str:
        """Start the broker unless it runs; its bootstrap address once a metadata request succeeds."""
        with self._locked(timeout_s + LOCK_TIMEOUT_S):
            return self._up(timeout_s)

    def _up(self, timeout_s: float) -> str:
        self.started = False
        note = self.clean_stale()
        if note:
            say(note + "; starting a new broker")
        running = self.bootstrap()
        if running:
            return running
        orphan = self._find_orphan()
        if orphan is not None:
            ports = self._configured_ports()
            if ports is not None:
                self.pid_file.write_text(f"{orphan}\n", encoding="utf-8")
                return self._await_ready(ports, timeout_s, orphan)
        java = self.java()
        ports = self._choose_ports()
        self.fetch()
        self._write_config(ports)
        self._format_storage(java)
        return self._start(java, ports, timeout_s)

    def restart(
        self, timeout_s: float = DEFAULT_UP_TIMEOUT_S, stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S
    ) -> str:
        """Stop and start again on the same ports and data (for broker-restart tests); the address."""
        with self._locked(timeout_s + stop_timeout_s + LOCK_TIMEOUT_S):
            return self._restart(timeout_s, stop_timeout_s)

    def _restart(self, timeout_s: float, stop_timeout_s: float) -> str:
        ports = self._configured_ports()
        if ports is None:
            raise BrokerError(f"no broker was set up in {self.kafka_dir}: run 'guardian kafka up' first")
        self._down(stop_timeout_s)
        if not self._wait_ports_free(15):
            raise BrokerError(
                f"the ports {ports.client}/{ports.controller} stayed busy after the broker stopped"
            )
        java = self.java()
        self._write_config(ports)
        return self._start(java, ports, timeout_s)

    def _start(self, java: str, ports: Ports, timeout_s: float) -> str:
        if not port_is_free(ports.client) or not port_is_free(ports.controller):
            raise BrokerError(
                f"port {ports.client} or {ports.controller} on {HOST} was taken before the broker started: "
                "run 'guardian kafka up' again"
            )
        if self._proc is not None:  # a previous child of ours: reap it rather than drop it running
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            self.release()
        cmd = self._java_cmd(java, "kafka.Kafka", str(self.server_properties))
        log: IO[bytes]
        with self.log_file.open("ab") as log:
            log.write(f"\n==== guardian kafka up {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.kafka_dir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        atomic_write(self.pid_file, f"{self._proc.pid}\n")
        self.started = True
        try:
            return self._await_ready(ports, timeout_s, self._proc.pid)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while it starts: never leave it running
            self._down(DEFAULT_STOP_TIMEOUT_S)
            raise

    def _await_ready(self, ports: Ports, timeout_s: float, pid: int) -> str:
        from streams.admin import probe_broker

        address = f"{HOST}:{ports.client}"
        deadline = time.monotonic() + timeout_s
        while True:
            if not self._is_ours(pid):
                code = self._proc.poll() if self._proc is not None and self._proc.pid == pid else None
                self._forget(pid)
                self.pid_file.unlink(missing_ok=True)
                last = next(
                    (ln for ln in reversed(tail(self.log_file)) if "ERROR" in ln or "Exception" in ln), ""
                )
                raise BrokerError(
                    f"the Kafka broker exited during start (exit code {code}); see the last lines of "
                    f"{self.log_file}" + (f" ({last.strip()[:200]})" if last else "") + f"; or {WAYS_OUT}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._down(DEFAULT_STOP_TIMEOUT_S)
                raise BrokerError(
                    f"the Kafka broker did not answer on {address} within {timeout_s:.0f} s and was stopped; "
                    f"see {self.log_file}; or {WAYS_OUT}"
                )
            probe = functools.partial(probe_broker, address, min(5.0, remaining))
            if port_accepts(ports.client) and run_sync(probe):
                atomic_write(self.bootstrap_file, address + "\n")
                return address
            time.sleep(0.2)

    def down(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> bool:
        """Stop the broker this data dir started (SIGTERM, then SIGKILL); whether one was running."""
        with self._locked(timeout_s + LOCK_TIMEOUT_S):
            return self._down(timeout_s)

    def _down(self, timeout_s: float) -> bool:
        pid = self._read_pid()
        if pid is None or not self._is_ours(pid):
            orphan = self._find_orphan()
            pid = orphan
        stopped = False
        if pid is not None and self._is_ours(pid):
            stopped = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not self._wait_gone(pid, timeout_s):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._wait_gone(pid, 10)
            self._wait_ports_free(10)
        self._forget(pid)
        self.pid_file.unlink(missing_ok=True)
        self.bootstrap_file.unlink(missing_ok=True)
        return stopped

    def _wait_ports_free(self, timeout_s: float) -> bool:
        """Whether the configured ports are free (a JVM's last threads may hold them a moment longer)."""
        ports = self._configured_ports()
        if ports is None:
            return True
        deadline = time.monotonic() + timeout_s
        while not (port_is_free(ports.client) and port_is_free(ports.controller)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _wait_gone(self, pid: int, timeout_s: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            # our child: only its exit status counts (while the JVM exits, /proc shows its main thread
            # as a zombie before the process can be reaped)
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if read_cmdline(pid) is None:
                return True
            time.sleep(0.1)
        return read_cmdline(pid) is None

    def _forget(self, pid: int | None) -> None:
        """Reap our child (no zombie, no ResourceWarning) once it is gone."""
        if (
            self._proc is not None
            and (pid is None or self._proc.pid == pid)
            and self._proc.poll() is not None
        ):
            self._proc = None

    def release(self) -> None:
        """Let a started broker live on after this object (the CLI's ``up``): drop the child handle."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                del proc  # Popen.__del__ runs here and would warn "subprocess is still running"

    def describe(self) -> str:
        pid = self.pid()
        if pid is None:
            return f"not running (data in {self.kafka_dir})"
        return f"running at {self.bootstrap()} (pid {pid}, data in {self.kafka_dir}, log {self.log_file})"
