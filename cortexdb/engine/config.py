"""Engine configuration: every knob has a production default."""

from __future__ import annotations

import attrs

LLM_PROVIDERS = ("extractive", "openai_compatible")  # engine/llm/: which answers a deployment's questions


@attrs.frozen(kw_only=True)
class EngineConfig:
    tenant_id: str = "default"
    default_caller: str = "user:local"
    mailbox_size: int = 1024  # bounded: a full mailbox makes senders wait (backpressure)
    capture_group: int = 512  # most captures one group commit takes from the mailbox
    # most events one derivation batch processes per stage (a smaller backlog goes whole): a
    # batch re-synthesises each subject it touches once, so a backlog derives in fewer, larger
    # batches (docs/decisions.md, "Larger derivation batches")
    pipeline_batch: int = 512
    # derivation defers to captures waiting in the mailbox until this many events are queued;
    # beyond it derivation runs regardless, so a sustained overload slows capture (backpressure)
    # instead of growing the backlog without bound
    derivation_backlog_soft: int = 50_000
    derivation_defer: float = 0.001  # seconds of capture silence derivation waits for
    pipeline_cache_events: int = (
        20_000  # queued events kept in memory; the rest reload from storage
    )
    # facts and beliefs a scope's lane keeps decoded (each kind); beyond it the oldest go at the
    # end of a batch and reload from storage when needed (docs/decisions.md, "Soak memory")
    derived_cache_records: int = 1024
    # entities the resolver keeps decoded, engine-wide, and as many alias entries: beyond it the
    # oldest stored ones go (three quarters stay) and are read again when next resolved
    # (docs/decisions.md, "What the derivation caches keep")
    entity_cache_max: int = attrs.field(default=16_384, validator=attrs.validators.ge(1))
    # bytes of stored episode JSON recall keeps decoded per scope (besides at most 128 episodes)
    episode_cache_bytes: int = 1 << 20
    # member rows of open episodes (an event id and a causal role each, ~225 bytes decoded) a scope
    # keeps decoded between reads, so a recall reads only the rows added since; 0: none kept
    # (docs/decisions.md, "An open episode's member rows read once")
    episode_rows_cached: int = attrs.field(default=1000, validator=attrs.validators.ge(0))
    # closed facts and beliefs a scope remembers so that a plain recall skips them unread (17 bytes
    # each); beyond it the oldest quarter is forgotten and read (then dropped) if a search finds
    # them (docs/decisions.md, "The closed records as sorted bytes")
    closed_records_max: int = attrs.field(default=1_000_000, validator=attrs.validators.ge(1))
    # Open scopes (docs/server.md, "Open scopes"): an open scope holds its actor and its
    # in-memory indexes.  An idle one (no request, no queued or running work, not held) is released
    # - actor stopped, indexes dropped; the next request reopens it from storage - once idle for
    # idle_timeout seconds, and least recently used first while the open scopes' estimated memory
    # (actors/residency.py) exceeds scope_memory_budget_mb (0: no budget, the timeout alone)
    idle_timeout: float = 300.0
    scope_memory_budget_mb: float = 1024.0
    release_check_interval: float = 5.0  # seconds between two sweeps for scopes to release
    restart_backoff_max: float = 5.0
    shutdown_grace: float = 10.0  # how long a graceful stop waits for actors before cancelling them
    episode_strategy: str = "time_gap"  # time_gap | session | thread | turn_pair | daily (a scope may choose its own)
    episode_gap_seconds: float = 1800.0
    episode_max_events: int = 500
    episode_idle_check: float = 60.0  # how often an idle pipeline checks for episodes to seal
    confidence_floor: float = 0.3  # tenant confidence floor for beliefs (§7.4)
    # the tenant default revision policy of new beliefs (§7.4 revision_policy)
    belief_min_evidence_delta: float = 0.05
    belief_cooldown: str = "PT0S"
    belief_max_revisions_per_hour: int = 3600
    # how a belief's confidence follows from its evidence: "beta_posterior" (the posterior mean) or
    # "min_input" (the same, never above its weakest supporting fact's confidence; docs/extraction.md)
    belief_confidence_rule: str = attrs.field(default="beta_posterior",
                                              validator=attrs.validators.in_(("beta_posterior", "min_input")))
    lifecycle_window_seconds: float = 3600.0
    subscriber_buffer: int = 10_000
    idempotency_ttl_seconds: float = 86_400.0
    maintenance_interval: float = 60.0
    # seconds between two returns of freed heap pages to the system (malloc_trim, memtrim.py) by
    # the engine's trim timer, besides the ones after vector builds; 0: none by the timer
    # (docs/decisions.md, "Trimming freed heap more often")
    memory_trim_interval: float = attrs.field(default=60.0, validator=attrs.validators.ge(0))
    # allocations of at least this many bytes get their own mapping, returned to the OS on free,
    # for the whole process (glibc's M_MMAP_THRESHOLD, fixed so it no longer climbs to 32 MiB and
    # large buffers stop fragmenting the heap; memtrim.py).  None: glibc's dynamic default.
    # glibc's MALLOC_MMAP_THRESHOLD_ environment variable, when set, wins.  Not glibc: ignored.
    malloc_mmap_threshold: int | None = attrs.field(default=65_536, validator=attrs.validators.optional(
        [attrs.validators.ge(0), attrs.validators.le(32 * 1024 * 1024)]))
    # the size of the data blocks LevelDB writes its tables in (plyvel's block_size; new tables
    # only: a data dir's older tables keep theirs until compaction rewrites them).  Each open
    # table keeps an index entry per block in memory, so smaller blocks cost memory per record;
    # larger ones cost CPU per point read (docs/decisions.md, "LevelDB blocks of 16 KiB";
    # LevelDB's own 4 KiB kept as the default: "The block size's default stays 4 KiB").
    leveldb_block_size: int = attrs.field(default=4096, validator=[attrs.validators.ge(1024),
                                                                     attrs.validators.le(4 * 1024 * 1024)])
    bulk_max_items: int = 1000
    # the largest text one event may carry, in bytes of UTF-8: content.text, a triple's object, and
    # json content as encoded.  1 MiB holds the envelope's 1,000,000-character text when it is ASCII
    # and bounds what a multi-byte text costs to derive; a larger text is refused at validation,
    # before anything is written, with 413 PAYLOAD_TOO_LARGE (docs/decisions.md, "Bounded work")
    max_event_text_bytes: int = 1_048_576
    # facts + entities one event may derive; the extractor's output beyond it is not derived, and
    # the event's `extracted` record says so (intake status rejected, reason derived_records_limit)
    max_derived_per_event: int = 256
    # an event whose text is longer than this many characters is indexed as passages of at most
    # this size (about 300 tokens), split at paragraph and sentence ends; recall returns the
    # matching passage, not the whole text
    passage_max_chars: int = 1200
    # where derivation's CPU work on long texts (extraction, tokenising, hash embedding) runs:
    # "thread" | "process" (worker processes, trio-parallel: no GIL shared with the event loop, so
    # other requests wait less; falls back to threads when the extractor or embedder cannot be
    # pickled or a worker cannot start).  Processes use the spawn start method, which re-imports
    # the program's main module: only for programs whose main module has an
    # `if __name__ == "__main__"` guard — `cortexdb serve` uses them (docs/decisions.md)
    derivation_workers: str = "thread"
    # how many such workers may run at once, engine-wide: on 2 cores one leaves a core to serve
    derivation_worker_limit: int = 1
    # seconds of real time a worker process has to answer its first call: a program whose main
    # module starts work at import (no guard) spawns workers that never answer; past this,
    # derivation runs in threads from then on (docs/decisions.md, "A worker process that never
    # starts"); 0: no deadline
    derivation_worker_start_seconds: float = attrs.field(default=60.0, validator=attrs.validators.ge(0))
    forget_max_memory_ids: int = 10_000  # ids one forget's selector may name (422 beyond)
    read_default_limit: int = 50
    read_max_limit: int = 1000
    recovery_scan_chunk: int = 10_000
    embedder: str = "hash"  # hash | minilm | best (the server uses "best")
    reembed: bool = (
        False  # opening a data dir made with another embedder: re-embed instead of failing
    )
    # how a conversation turn's vector carries the previous turn of its session (decisions.md,
    # "Turn context by pooling"): "pooled" (each text encoded once, token vectors pooled with the
    # predecessor's), "joint" (the two texts encoded together: twice the tokens), "none"
    turn_context: str = attrs.field(default="pooled", validator=attrs.validators.in_(("pooled", "joint", "none")))
    # "pooled": the previous turn's token sums count this much beside the turn's own (1: as much)
    turn_context_weight: float = attrs.field(default=0.5, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    # when derived records (facts, beliefs, episodes, concepts) get their vectors (decisions.md,
    # "Derived vectors in a backlog"): "deferred" (their texts wait in a per-scope backlog,
    # embedded together, each record once with its latest text, when the lane has been idle
    # derived_vectors_quiet seconds or a flush waits, when the backlog holds
    # derived_vectors_backlog records, or before a recall searches their layer), "eager" (in
    # the stage that derives them), "auto" (deferred with a model embedder, eager with the hash one)
    derived_vectors: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", "deferred", "eager")))
    derived_vectors_backlog: int = attrs.field(default=1024, validator=attrs.validators.ge(1))
    derived_vectors_quiet: float = attrs.field(default=0.25, validator=attrs.validators.ge(0))
    vector_segment_size: int = 20_000  # delta vectors sealed into an annoy segment
    vector_trees: int = 50  # annoy's trees (vector_sealed "annoy", or a scope without a data dir)
    # what a sealed segment of vector_segment_size vectors or more is with a data dir: "ivf" (the
    # rows in a file ordered by a coarse quantizer's lists, a search reading the nearest lists'
    # rows: about 28 bytes a vector in memory) or "annoy" (memory-mapped trees, whose pages a
    # search touches all over: ~2 KB a vector resident); without a data dir, annoy in memory
    # (docs/decisions.md, "Sealed vectors: IVF lists over a flat run")
    vector_sealed: str = attrs.field(default="ivf", validator=attrs.validators.in_(("ivf", "annoy")))
    # how the exact delta keeps its vectors in memory: float16 (half of float32's bytes, cosines
    # within ~1e-4), float32, or int8 with a per-vector scale (a quarter; ~2e-3); the stored
    # vectors stay float32.  With a data dir, sealed segments are memory-mapped files in its
    # vector-segments/ folder (docs/decisions.md, "Index memory")
    vector_dtype: str = attrs.field(
        default="float16", validator=attrs.validators.in_(("float16", "float32", "int8"))
    )
    vector_delta_chunk: int = 1024  # the delta grows by this many rows at a time
    # with a data dir, the delta is sealed every this many vectors into a flat run in a file of
    # vector-segments/ (read with pread, scored exactly; runs merge, and become an annoy segment
    # at vector_segment_size): the only vectors in memory are the delta's
    # (docs/decisions.md, "Soak memory", "Runs by default").  2048 (the default): the delta holds
    # at most that many vectors a layer; 0: no runs, the delta grows to vector_segment_size (every
    # vector of a scope below it in anonymous memory).  No effect without a data dir
    vector_run_rows: int = 2048
    # with a data dir and vector_sealed "ivf": sealed vector segments (runs and IVF segments) are
    # kept in vector-segments/<scope>/<layer>/ with a manifest, and a reopen maps them, checking
    # each row against the stored vectors, instead of rebuilding them (docs/decisions.md, "Sealed
    # vector segments kept across a reopen"); False: every open rebuilds them from the stored vectors
    vector_segments_kept: bool = True
    # BM25: each layer's newest documents stay in a small mutable delta; every text_seal_docs of
    # them are sealed into a segment of flat arrays (with a data dir, in an unlinked file of
    # text-segments/, memory-mapped), and segments merge in the background up to
    # text_segment_docs documents (docs/decisions.md, "BM25 in sealed segments")
    text_seal_docs: int = attrs.field(default=2048, validator=attrs.validators.ge(1))
    # with a data dir, each layer's sealed BM25 segments and their vocabulary are kept in
    # text-segments/<scope>/<layer>/ with a manifest, and a reopen maps them, re-tokenising only
    # the documents no kept slot holds with the same text (docs/decisions.md, "Sealed text
    # segments kept across a reopen"); False: every open re-tokenises every text
    text_segments_kept: bool = True
    text_segment_docs: int = attrs.field(default=65_536, validator=attrs.validators.ge(1))
    recall_candidates: int = 100  # per scope and per index (BM25, vector) before scoring
    # a temporal question's windowed retrieval (docs/router.md) looks at most this many hits per
    # layer and index for records that happened in the window, beyond the recall_candidates cut
    recall_window_examined: int = 200
    recall_deadline: float = 5.0  # seconds a scope may take before the pack degrades without it
    pack_ttl_seconds: float = 60.0
    pack_cache_max: int = 1000  # recall packs kept for replay and GET; beyond it the oldest go first
    pack_cache_bytes: int = 16 << 20  # and at most this much of them, as JSON (oldest out first)
    # hybrid (default) | bm25 | vector: which candidate sources and signals recall uses
    # (the single-signal modes exist for benchmark arms and diagnosis)
    recall_mode: str = "hybrid"
    # recall ranking after the blend (recall/quality.py; decisions.md "Recall quality after the blend"):
    # added to the score of the candidates whose speaker (an event's observed actor, a fact's or a
    # belief's subject) the question names, when it names some of the voices present but not all
    recall_speaker_weight: float = attrs.field(default=0.1, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    # an event candidate gets this times the best score of the other candidates of its episode
    recall_episode_weight: float = attrs.field(default=0.3, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    # an event candidate gets this times min(1, its words / recall_length_words): a length prior
    recall_length_weight: float = attrs.field(default=0.1, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    recall_length_words: int = attrs.field(default=30, validator=attrs.validators.ge(1))
    # an event candidate loses this times the share of its words in sentences ending with "?": a
    # turn that asks holds no answer (recall/length_prior.py ``asks``)
    recall_question_weight: float = attrs.field(default=0.2, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    # diversity across where events were said, off (recall/diversity.py; recall-signals.md "Diversity
    # across sessions": it lost on LoCoMo): within each session (recall_diversity_by "session", an event of no session falls
    # back to its episode) or episode ("episode"), the n-th best event candidate loses
    # recall_diversity_weight * n / (n + 1) of its score (0: off)
    recall_diversity_weight: float = attrs.field(default=0.0, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    recall_diversity_by: str = attrs.field(default="session", validator=attrs.validators.in_(("session", "episode")))
    # a hybrid recall searches its indexes with the question less the words naming a voice of the
    # scope (recall/speakers.py content_query; decisions.md "The question's content"): the turns
    # are indexed led by their speaker's name, which the speaker prior weighs instead
    recall_content_query: bool = True
    # pseudo-relevance feedback (actors/requery.py, retrieve/feedback.py; decisions.md "Candidates
    # beyond the question's words"): the best recall_feedback_docs event hits of the first search
    # (0: no second search) move the query vector toward their mean (recall_feedback_vector,
    # Rocchio's beta) and add their recall_feedback_terms heaviest terms to the BM25 query (0: none;
    # it lost on LoCoMo); each layer is searched again, at most recall_feedback_new new hits of it
    # become candidates, and every candidate is scored against the moved query
    recall_feedback_docs: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    recall_feedback_vector: float = attrs.field(default=0.15, validator=[attrs.validators.ge(0), attrs.validators.le(4)])
    recall_feedback_terms: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    recall_feedback_new: int = attrs.field(default=50, validator=attrs.validators.ge(0))
    # -- understanding (reference §7.5, §8.7.7-§8.7.11; docs/understanding.md) ------------------
    understanding_enabled: bool = True  # False: no synthesis (concepts say synthesis_disabled_by_policy)
    understanding_min_support: int = 2  # records a concept needs to be complete (_partial: false)
    understanding_max_inputs: int = 50  # records one concept consults (coverage_score says if fewer)
    # support lost (forgotten) beyond this fraction deprecates a concept (hidden from default reads)
    understanding_invalidation_threshold: float = 0.5
    # a closed concept version is stored as edits of the next one, and one in every this many
    # whole: the most rows an as-of read of a concept goes through (1: every version whole)
    understanding_version_chain: int = attrs.field(default=16, validator=attrs.validators.ge(1))
    synthesis_max_running: int = 2  # synthesize jobs running at once; one more is 429 RATE_LIMITED
    vocabulary_max_terms: int = 500  # terms (predicates + relations) in one vocabulary (422 beyond)
    vocabulary_max_aliases: int = 50  # aliases of one term (422 beyond)
    # -- relationships and the query router (docs/relationships.md, docs/router.md) --------------
    recall_router: bool = True  # False: no routing, no graph expansion (the bench's "off" arm)
    relationship_max_depth: int = 4  # the deepest walk GET /v1/relationships may ask for
    relationship_max_edges: int = 200  # edges one walk returns at most (``truncated`` says so)
    recall_relationships_limit: int = 10  # edges a recall pack's ``relationships`` part holds
    recall_relationships_examined: int = 40  # facts one recall's walk may load per scope (its budget)
    facets_limit: int = 10  # entries per facet (topics, entities, predicates) of temporal_facets
    # freshness: how recently memory learned or last revised a record (its recorded time), a
    # recall signal beside recency (when it happened): its half-life and its weight in the blend
    freshness_half_life_days: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    freshness_weight: float = attrs.field(default=0.05, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    # -- GDPR erasure jobs (reference §8.6, §11.3; engine/forget/erasure.py, docs/forget.md) ------
    # a preview's manifest (and a finished erasure's) answers for this long, then 410
    erasure_manifest_ttl_seconds: float = 86_400.0
    # how long an expired manifest still answers 410 RESOURCE_DELETED (then 404 NOT_FOUND)
    erasure_manifest_tombstone_seconds: float = 7 * 86_400.0
    # new events under the scope since the preview that an execute tolerates before it 409s
    # (the server's tenant default ``erasure.drift_threshold`` overrides it per tenant)
    erasure_drift_threshold: int = 0
    # §11.3 phase 5: a belief whose support is fully redacted keeps confidence * this factor
    # (tenant default ``confidence_after_full_redaction_factor`` overrides it)
    erasure_redaction_factor: float = 0.5
    erasure_chunk: int = 1000  # events or records per deletion step (one progress tick each)
    erasure_max_running: int = 4  # erasure jobs running at once; one more is 429 RATE_LIMITED
    # what a preview's estimated_duration_ms assumes (bench/forget.py measures the real rate)
    erasure_estimate_events_per_second: float = 2000.0
    # -- imports and exports (reference §8.11-§8.12; engine/transfer/, docs/import-export.md) -----
    # where uploaded sources are spooled and export files written: None is <data dir>/transfer
    # (LevelDB) or a temporary directory (memory backend, which cannot resume a job anyway)
    transfer_dir: str | None = None
    import_max_bytes: int = 1024 * 1024 * 1024  # the largest source one import may upload (413)
    import_max_running: int = 4  # import jobs running at once; one more is 429 RATE_LIMITED
    # strict_temporal sorts the whole file by observed_at within each scope (an external merge
    # sort, transfer/extsort.py): runs of this many records, encoded, are sorted in memory and
    # written to disk; batch_throughput trims freed memory after this many records
    import_window: int = 10_000
    # the disk a strict_temporal import's sorted runs may take (413 PAYLOAD_TOO_LARGE ends the
    # job beyond it); about the size of the mapped records, 1-2x the source's
    import_sort_max_bytes: int = attrs.field(default=4 * 1024 * 1024 * 1024, validator=attrs.validators.ge(1))
    # runs merged at once: more are merged, the smallest first, into one (files open and read
    # buffers while merging: this many)
    import_sort_fan_in: int = attrs.field(default=64, validator=attrs.validators.ge(2))
    # a re-imported JSONL export's preceded_by links become our event ids: the last this many
    # source ids an import wrote are remembered (~150 bytes each); an older one is kept as written
    import_link_memory: int = 100_000
    import_max_errors: int = 100  # the first errors an import's status keeps (all are counted)
    # while an import writes, CPython's collector thresholds (its defaults 700, 10, 10): a young
    # collection every 50,000 net allocations, a middle one every 20 of those, a full one about
    # every 15,000,000 (the defaults: 7,000 to 70,000), process-wide, each never below what is
    # set, put back when the last import ends (transfer/collector.py); None leaves it alone
    import_gc_thresholds: tuple[int, int, int] | None = (50_000, 20, 15)
    export_max_running: int = 4  # export jobs running at once; one more is 429 RATE_LIMITED
    export_inline_max_bytes: int = 16 * 1024 * 1024  # an inline export's largest size (else a file)
    export_max_bytes: int = 4 * 1024 * 1024 * 1024  # an export file's largest size (413 beyond)
    export_retention_seconds: float = 24 * 3600.0  # a finished export's file is kept this long (410 after)
    export_page_bytes: int = 1024 * 1024  # an export reads records in pages of about this many bytes of JSON
    job_retry_limit: int = 5  # retries of a job phase after a retriable error, then failed
    # the largest blob one upload may store (POST /v1/blobs, Engine.blobs.put), in bytes: 100 MiB,
    # the reference's 100 MB (§8.13); a larger one is refused with 413 PAYLOAD_TOO_LARGE
    blob_max_bytes: int = 100 * 1024 * 1024
    # -- answers and narratives (reference §8.4, §9.1 view=narrative; engine/llm/, docs/answer.md) --
    # who composes them: "extractive" (offline, deterministic: the pack's own sentences, cited) or
    # "openai_compatible" (chat completions at llm_base_url: OpenAI, vLLM, llama.cpp, Ollama)
    llm_provider: str = attrs.field(default="extractive", validator=attrs.validators.in_(LLM_PROVIDERS))
    llm_model: str = ""  # the model requests are routed to by default ("" = "extractive"; openai_compatible needs one)
    llm_models: tuple[str, ...] = ()  # further model ids the same endpoint serves (answer_model may name them)
    llm_base_url: str = ""  # e.g. https://api.openai.com/v1, http://127.0.0.1:11434/v1 (Ollama)
    # the API key: read from this file when set, else from this environment variable; never logged
    llm_api_key_file: str = ""
    llm_api_key_env: str = "CORTEX_LLM_API_KEY"
    llm_timeout: float = 60.0  # seconds per attempt (connect, each read, each write); not retried
    llm_max_retries: int = 3  # more attempts after a 429, a 5xx or a failed connection
    llm_backoff: float = 0.5  # seconds before the first retry, doubling (or the server's Retry-After)
    llm_backoff_max: float = 20.0  # the longest wait between attempts; a longer Retry-After fails at once
    answer_max_tokens: int = 1024  # an answer's output ceiling when the request names none
    answer_max_tokens_limit: int = 8192  # the largest answer_max_tokens a request may ask (422 beyond)
    # a blob no event refers to is deleted by the maintenance timer (Engine.blobs.collect_garbage)
    # once it is this old by the engine's clock: 24 h leaves an upload time for the capture that
    # will refer to it
    blob_orphan_grace_seconds: float = 86_400.0
    # -- signals (engine/signals.py, docs/signals.md) -------------------------------------------
    # a trajectory compares a type's level now with its level this many seconds ago
    signal_window_seconds: float = 7 * 86_400.0
    signal_trajectory_threshold: float = 0.1  # a smaller change of the level is "stable"
    signal_floor: float = 0.05  # levels under it count as fully decayed ("neutral")
    signal_custom_half_life_seconds: float = 3 * 86_400.0  # a custom type without settings
    # deployment overrides of the built-in types, and settings of custom ones:
    # ((type, half_life_seconds, "positive" | "negative"), ...); a tenant's own settings win
    signal_types: tuple[tuple[str, float, str], ...] = ()
    signal_snapshot_max: int = 10_000  # signals one snapshot reads in a scope (422 beyond: narrow it)
    recall_signals_max: int = 20  # signals a recall pack carries (the rest counted in diagnostics; 0: none read)
    signal_note_max_chars: int = 1000  # a signal's note (422 beyond)
    proposal_text_max_chars: int = 2000  # a proposal's rationale, a review's note (422 beyond)
    # -- intake results (docs/intake.md) ----------------------------------------------------------
    # the intake statuses queued for the writing agent to read and acknowledge (GET /v1/intake/pending)
    intake_queue_statuses: tuple[str, ...] = ("conflict_detected", "needs_clarification")
    intake_max_questions: int = 10  # pronoun questions listed per event (the rest counted in one entry)
    intake_name_candidates: int = 20  # entities a one-word name is compared with (ambiguous_entity); names a pronoun question offers
    # -- several nodes on one shared store (engine/placement.py, docs/scale-out.md) --------------
    # this node's name in the store's lease table; "" (the default): one node, no leases.  Set,
    # the store must have leases (postgres) and the node serves only the scope partitions (top
    # scopes) it holds a lease on, fencing every write of their actors with the lease's token
    node_id: str = ""
    lease_ttl: float = 15.0  # seconds a partition's lease lasts without a renewal
    lease_renew_interval: float = 5.0  # seconds between renewals (and takeover sweeps)
    wal_block: int = 1024  # WAL offsets a node takes from the shared counter at a time

    def leveldb_options(self) -> dict[str, int]:
        """The plyvel options this configuration sets over the LevelDB store's defaults."""
        return {"block_size": self.leveldb_block_size}
