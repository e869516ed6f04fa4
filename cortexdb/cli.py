"""``cortexdb`` — the command line.

    cortexdb version
    cortexdb rebuild --data DIR --scope SCOPE     replay a scope's WAL into fresh derived layers
    cortexdb inspect --data DIR --scope SCOPE     counts of a scope's records, for operators

``serve`` and ``token`` arrive with the HTTP server.
"""

from __future__ import annotations

import argparse
import sys

import trio

from . import __version__
from .errors import CortexError


async def _rebuild(data: str, scope: str) -> None:
    from . import open_engine

    async with open_engine("leveldb", path=data) as engine:
        await engine.rebuild(scope)
        print(f"rebuilt {scope}")


async def _inspect(data: str, scope: str) -> None:
    from . import open_engine

    async with open_engine("leveldb", path=data) as engine:
        counts = {}
        for layer, read in (("events", engine.events), ("episodes", engine.episodes), ("facts", engine.facts),
                            ("beliefs", engine.beliefs)):  # fmt: skip
            total, cursor = 0, None
            while True:
                page = await read(scope, limit=1000, cursor=cursor)
                total += len(page["items"])
                if not page["has_more"]:
                    break
                cursor = page["next_cursor"]
            counts[layer] = total
        print(
            " ".join(f"{name}={value}" for name, value in counts.items()),
            f"wal_offset={engine.wal_offset}",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="cortexdb", description="CortexDB, a memory database for AI agents"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print the version")
    for name, help_text in (("rebuild", "replay a scope's WAL into fresh derived layers"),
                            ("inspect", "count a scope's records")):  # fmt: skip
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--data", required=True, help="LevelDB data directory")
        command.add_argument("--scope", required=True, help="scope path, e.g. org:acme/user:alice")
    args = parser.parse_args(argv)
    try:
        if args.command == "version":
            print(__version__)
        elif args.command == "rebuild":
            trio.run(_rebuild, args.data, args.scope)
        elif args.command == "inspect":
            trio.run(_inspect, args.data, args.scope)
    except CortexError as error:
        print(f"cortexdb: {error.error_code}: {error.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
