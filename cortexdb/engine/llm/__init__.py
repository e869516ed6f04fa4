"""The LLM providers (``spi/llm.py``) and the router that picks one per request.

A deployment configures one provider (``EngineConfig.llm_provider``: ``extractive`` by default,
offline; or ``openai_compatible``) with a default model and, optionally, more model ids the same
endpoint serves (``llm_models``).  A request's ``answer_model`` is routed to the provider serving
that id; none names the default; ``extractive`` is always available (offline, free); any other
id is ``422 INVALID_ANSWER`` (``details.field: answer_model``, ``details.available``).  An
application embedding the engine may bring its own provider (``open_engine(llm=...)``): it
becomes the default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import InvalidAnswer, LLMUnavailable
from .extractive import ExtractiveLLM
from .openai_compatible import OpenAICompatibleLLM


def api_key(config: Any) -> str | None:
    """The configured API key: the file's contents (``llm_api_key_file``), else the environment
    variable's (``llm_api_key_env``); None when neither is set."""
    if config.llm_api_key_file:
        try:
            key = Path(config.llm_api_key_file).read_text().strip()
        except OSError as exc:
            raise LLMUnavailable(
                f"the LLM API key file {config.llm_api_key_file} cannot be read ({exc.strerror or exc})",
                details={"reason": "configuration", "setting": "llm_api_key_file"}, retriable=False) from None  # fmt: skip
        return key or None
    return os.environ.get(config.llm_api_key_env) or None if config.llm_api_key_env else None


def configured(config: Any) -> list[Any]:
    """The deployment's providers, the default first."""
    if config.llm_provider == "extractive":
        return [ExtractiveLLM(config.llm_model or "extractive")]
    if not config.llm_base_url or not config.llm_model:
        raise LLMUnavailable("the openai_compatible provider needs llm_base_url and llm_model",
                             details={"reason": "configuration", "setting": "llm_base_url" if not config.llm_base_url
                                      else "llm_model"}, retriable=False)  # fmt: skip
    key = api_key(config)
    return [OpenAICompatibleLLM(base_url=config.llm_base_url, model=model, api_key=key, timeout=config.llm_timeout,
                                max_retries=config.llm_max_retries, backoff=config.llm_backoff,
                                backoff_max=config.llm_backoff_max)
            for model in dict.fromkeys((config.llm_model, *config.llm_models))]  # fmt: skip


class LLMRouter:
    """``answer_model`` → the provider that serves it."""

    def __init__(self, providers: list[Any], *, brought: Any = None) -> None:
        self.default = providers[0]
        self.brought = brought  # the application's own provider: it closes it, not we
        self.models: dict[str, Any] = {}
        for provider in providers:
            self.models.setdefault(provider.model, provider)
        if not any(p.provider == "extractive" for p in self.models.values()):
            self.models.setdefault("extractive", ExtractiveLLM())

    @classmethod
    def open(cls, config: Any, llm: Any = None) -> LLMRouter:
        return cls([llm], brought=llm) if llm is not None else cls(configured(config))

    def available(self) -> list[str]:
        return list(self.models)

    def route(self, model: str | None) -> Any:
        if model is None:
            return self.default
        found = self.models.get(model)
        if found is None:
            error = InvalidAnswer("answer_model", f"{model[:100]!r} is not served here; use one of "
                                  f"{self.available()} or omit it for the deployment's default")  # fmt: skip
            error.details["available"] = self.available()
            raise error
        return found

    async def aclose(self) -> None:
        for provider in self.models.values():
            if provider is not self.brought:
                await provider.aclose()


__all__ = ["ExtractiveLLM", "LLMRouter", "OpenAICompatibleLLM", "api_key", "configured"]
