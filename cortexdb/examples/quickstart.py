"""The quickstart from docs/embedding.md: ``python -m cortexdb.examples.quickstart [DATA_DIR]``."""

import sys
import tempfile

import trio

import cortexdb


async def main(data_dir: str) -> None:
    async with cortexdb.open_engine("leveldb", path=data_dir) as engine:
        scope = "org:acme/user:alice"

        def said(text: str, when: str) -> dict:
            return {
                "scope": scope,
                "modality": "conversation",
                "content": {"kind": "message", "role": "user", "text": text},
                "context": {"observed_at": when},
            }

        # Watch the pipeline: captured -> extracted -> indexed -> consolidated (-> compressed).
        async with engine.subscribe(scope=scope) as feed:
            first = await engine.experience(
                said("I live in Paris and my favorite color is blue.", "2026-03-01T09:00:00Z"),
                caller="user:alice",
                wait="consolidated",  # or omit wait: it returns as soon as the WAL has it
            )
            stages = [(await feed.__anext__()).stage for _ in range(4)]
        print("stages:", stages)
        print("derived:", first.derives)

        # A later, contradicting experience supersedes the old fact instead of overwriting it.
        await engine.experience(
            said("I moved to Berlin.", "2026-04-15T09:00:00Z"),
            caller="user:alice",
            wait="consolidated",
        )
        facts = await engine.facts(scope, subject="user:alice", predicate="lives_in")
        print("lives in now:", [f["object"]["name"] for f in facts["items"]])
        timeline = await engine.facts_timeline(scope, subject="user:alice", predicate="lives_in")
        for step in timeline["timeline"]:
            print("  ", step["value"]["name"], step["valid_from"], "->", step["valid_to"])

        # Beliefs: confidence with a credible interval; valid_during=".." names every claim, ended too.
        for belief in (await engine.beliefs(scope, valid_during=".."))["items"]:
            claim = belief["claim"]
            value = claim["object"].get("name", claim["object"].get("value"))
            interval = belief["confidence_interval"]
            print(
                f"  belief {claim['predicate']}={value}: {belief['stance']} "
                f"{belief['confidence']:.2f} [{interval['lower']:.2f}, {interval['upper']:.2f}]"
            )

        # Bad input is a clear error, never a traceback from deep inside.
        try:
            await engine.experience(
                {
                    "scope": scope,
                    "modality": "conversation",
                    "content": {"kind": "message", "text": "no role"},
                    "context": {"observed_at": "2026-04-15T09:00:00Z"},
                }
            )
        except cortexdb.InvalidEnvelope as error:
            print(
                "rejected:", error.error_code, error.details["field"], "-", error.details["reason"]
            )

        await engine.flush(scope, seal=True)  # seal the open episode
        episodes = await engine.episodes(scope)
        print("episodes:", [(e["name"], e["status"]) for e in episodes["items"]])


if __name__ == "__main__":
    trio.run(
        main, sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="cortexdb-example-")
    )
