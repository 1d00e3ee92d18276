"""Local stand-ins for network services some test suites need.

Upstream's containers reached the internet; old requests tests call httpbin.org. Inside
this sandbox's network namespace a private httpbin listens on loopback instead, and the
suite is pointed at it through the variable it already honours (``HTTPBIN_URL``). Each
test run gets its own namespace, so concurrent runs never share a port.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from swegreen.core.recipes import Recipe
from swegreen.sandbox.tools import tool


@dataclass(frozen=True)
class Service:
    name: str
    packages: tuple[str, ...]
    start: str  # shell command; {python} and {port} are filled in
    exports: dict[str, str] = field(default_factory=dict)  # {port} is filled in
    port: int = 18080

    def recipe(self) -> Recipe:
        """The environment the service runs from (the engine's own Python)."""
        return Recipe(
            python="host",
            packages=self.packages,
            test_cmd="true",
            # httpbin 0.10.4 came out on 2026-06-16: its date must not be earlier (a
            # 2026-01-01 date left the pin unresolvable, which tests/test_services.py found)
            exclude_newer="2026-06-30",
            notes=(f"environment of the local {self.name} service",),
        )


SERVICES: dict[str, Service] = {
    "httpbin": Service(
        name="httpbin",
        packages=("httpbin==0.10.4",),
        # -I: the service's own environment only, never the workspace it is started in
        # (it starts before the test wrapper drops its capabilities)
        start="{python} -I -m httpbin.core --port {port}",
        exports={"HTTPBIN_URL": "http://127.0.0.1:{port}/"},
    ),
}


def start_script(service: Service, python: Path, port: int | None = None) -> str:
    """Shell that starts ``service`` in the background, waits for its port, exports its URL."""
    port = port or service.port
    start = service.start.format(python=shlex.quote(str(python)), port=port)
    exports = " ".join(
        f"{k}={shlex.quote(v.format(port=port))}" for k, v in service.exports.items()
    )
    seq, sleep = tool("seq"), tool("sleep")  # not the PATH the environment's bin leads
    return (
        f"({start} >/dev/null 2>&1 &);"
        f" for _ in $({seq} 1 200); do (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && break;"
        f" {sleep} 0.05; done;" + (f" export {exports};" if exports else "")
    )
