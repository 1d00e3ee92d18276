"""Git objects up to a base commit and no further: what a workspace may borrow.

A checkout that borrows its objects from the repository cache (``git clone --shared``)
can read the whole later history, the upstream fix and its tests included, from code
that runs while the tests do. Upstream's images avoid that by purging the clone (reflogs
expired, future tags deleted, ``git gc --prune=now``): each image holds the history up to
its base commit and no more. Doing the same per instance would copy a repository's whole
history once per instance (231 copies of django's); instead the history is cut into
stores that instances share without any of them seeing past its own base:

- **anchors**: on a base commit's first-parent chain, the last commit before each
  calendar quarter. A base shares the anchors of every base whose first-parent chain runs
  through the same commits (all of a repository's mainline bases). The store of an anchor
  holds the objects reachable from it and not from the previous anchor;
- **the base's own store**: the objects reachable from the base and from the annotated
  tags it keeps (those merged into it, not dated after it), not from its last anchor.

Every store is a bare object directory of whole packs (no thin packs, no alternates of
its own); a checkout's ``objects/info/alternates`` lists its base's whole chain, flat (git
follows alternates of alternates only five levels deep).
Each store only ever holds ancestors of what it is named after, so a checkout that
borrows from a base's store, and a sandbox shown that store's chain and nothing else of
the history directory, can reach nothing after the base.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swegreen.processes.locks import file_lock
from swegreen.processes.procs import run_checked

CHAIN = "chain.json"


@dataclass(frozen=True)
class Cut:
    """A base commit's share of the history: its store's object directories (its own
    first, then every older one it borrows from), and the tags it keeps."""

    objects: tuple[Path, ...]
    tags: dict[str, str]  # refs/tags/<name> -> object id (annotated tags: the tag object)


def quarter_start(stamp: int) -> int:
    day = dt.datetime.fromtimestamp(stamp, dt.UTC)
    month = 1 + 3 * ((day.month - 1) // 3)
    return int(dt.datetime(day.year, month, 1, tzinfo=dt.UTC).timestamp())


def anchors(first_parents: list[tuple[str, int]]) -> list[str]:
    """Oldest first: for each calendar quarter before the base's, the newest commit of the
    base's first-parent chain (``first_parents``, newest first, the base itself first)
    dated before that quarter began."""
    if len(first_parents) < 2:
        return []
    out: list[str] = []
    boundary = quarter_start(first_parents[0][1])
    for commit, stamp in first_parents[1:]:
        if stamp < boundary:
            out.append(commit)
            boundary = quarter_start(stamp)
    return out[::-1]


class HistoryStores:
    """Stores of one cache directory, built from the repository cache's mirrors."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env

    def repo_dir(self, repo: str) -> Path:
        return self.root / repo.replace("/", "__")

    async def cut(self, repo: str, mirror: Path, base: str) -> Cut:
        """The stores a checkout of ``repo`` at ``base`` borrows from, built if missing
        (once per repository at a time, under a lock)."""
        here = self.repo_dir(repo)
        done = here / base / CHAIN
        if not done.exists():
            async with file_lock(self.root / ".locks" / f"{here.name}.lock"):
                if not done.exists():
                    await self._build(mirror, here, base)
        data = json.loads(done.read_text())
        return Cut(tuple(Path(p) for p in data["objects"]), dict(data["tags"]))

    async def _git(self, mirror: Path, *args: str, stdin: bytes | None = None) -> str:
        result = await run_checked(
            ["git", "--git-dir", str(mirror), *args], env=self.env, stdin_data=stdin
        )
        return result.output

    async def _build(self, mirror: Path, here: Path, base: str) -> None:
        listing = await self._git(mirror, "rev-list", "--first-parent", "--format=%ct", base)
        chain: list[tuple[str, int]] = []
        lines = iter(listing.splitlines())
        for line in lines:
            if line.startswith("commit "):
                chain.append((line.split()[1], int(next(lines).strip())))
        previous: str | None = None
        objects: list[Path] = []
        for anchor in anchors(chain):
            store = here / f"anchor-{anchor}"
            if not (store / CHAIN).exists():
                await self._pack(mirror, store, [anchor], previous, objects)
            objects.insert(0, store / "objects")
            previous = anchor
        tags = await self._kept_tags(mirror, base, chain[0][1])
        await self._pack(mirror, here / base, [base, *tags.values()], previous, objects, tags)

    async def _kept_tags(self, mirror: Path, base: str, base_time: int) -> dict[str, str]:
        """Tags that ``git describe`` can use at ``base``: merged into it, and not dated
        after it (upstream deletes those)."""
        out = await self._git(
            mirror,
            "for-each-ref",
            "--merged",
            base,
            "--format=%(refname) %(objectname) %(*committerdate:unix)%(committerdate:unix)",
            "refs/tags",
        )
        kept = {}
        for line in out.splitlines():
            name, oid, stamp = [*line.split(" ", 2), "", ""][:3]
            if stamp.strip().isdigit() and int(stamp) <= base_time:
                kept[name] = oid
        return kept

    async def _pack(
        self,
        mirror: Path,
        store: Path,
        tips: list[str],
        previous: str | None,
        older: list[Path],
        tags: dict[str, str] | None = None,
    ) -> None:
        """A bare object directory at ``store`` with the objects reachable from ``tips``
        and not from ``previous`` (whose store, and all older ones, it borrows from)."""
        await asyncio.to_thread(shutil.rmtree, store, True)  # an interrupted earlier one
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{store.name}.", dir=store.parent))
        try:
            (tmp / "objects" / "pack").mkdir(parents=True)
            (tmp / "objects" / "info").mkdir()
            revs = "".join(f"{t}\n" for t in tips) + (f"^{previous}\n" if previous else "")
            await self._git(
                mirror,
                "pack-objects",
                "--revs",
                # a source may lack blobs of old history (a public snapshot without its
                # largest files): the stores hold what exists; a checkout still needs
                # every blob of its own tree, and fails naming the missing one
                "--missing=allow-any",
                "--delta-base-offset",
                "-q",
                str(tmp / "objects" / "pack" / "pack"),
                stdin=revs.encode(),
            )
            # No alternates of its own: a checkout lists its whole chain flat (git follows
            # alternates of alternates only five levels deep), and each pack is whole.
            record = {"objects": [str(store / "objects"), *map(str, older)], "tags": tags or {}}
            (tmp / CHAIN).write_text(json.dumps(record))
            for path in [tmp, *tmp.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)  # read by sandboxed git
            tmp.replace(store)
        finally:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
