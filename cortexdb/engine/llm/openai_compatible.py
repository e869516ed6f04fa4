"""An ``LLM`` over the OpenAI chat-completions wire format (provider ``openai_compatible``):
``POST {base_url}/chat/completions``, whole or streamed (Server-Sent Events: ``data: {chunk}``
lines, then ``data: [DONE]``).  OpenAI, vLLM, llama.cpp's server, Ollama (``/v1``) and most
hosted gateways speak it.

- **Requests**: ``model``, the prompt's ``messages`` (``prompts.messages``), ``max_tokens``,
  ``temperature: 0``; streamed with ``stream_options.include_usage`` so the last chunk carries the
  token counts (a server that sends none: we count, ``prompts.COUNTED_BY``).
- **Timeouts**: ``timeout`` seconds per attempt for connecting, each read and each write (httpx
  on Trio, through anyio).  A timed-out attempt is not retried: the caller has waited enough.
- **Retries**: 429, 5xx and failed connections, up to ``max_retries`` more attempts, waiting
  ``backoff * 2**attempt`` seconds (at most ``backoff_max``) or the server's ``Retry-After`` when
  it says more; a ``Retry-After`` beyond ``backoff_max`` is not waited for.  A streamed answer is
  retried only before its first piece (the caller has shown nothing yet).
- **Failures** are ``LLMUnavailable`` (503, ``details.reason``: ``timeout``, ``connect``,
  ``overloaded``, ``server_error``, ``rejected``, ``malformed``), logged with the status and the
  provider's error ``code`` only.
- **The API key** is sent as ``Authorization: Bearer``.  It is never logged, never in an error
  (the provider's message is not quoted: some echo part of the key) and never in a ``repr``.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import trio

from ...errors import LLMUnavailable
from ..spi.llm import Completion, Prompt, Usage
from . import prompts

log = logging.getLogger("cortexdb.llm")
RETRIED = frozenset({429, 500, 502, 503, 504})


class OpenAICompatibleLLM:
    provider = "openai_compatible"

    def __init__(self, *, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0,
                 max_retries: int = 3, backoff: float = 0.5, backoff_max: float = 20.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:  # fmt: skip
        if not base_url or not model:
            raise ValueError("the openai_compatible provider needs a base URL and a model")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout),
                                       transport=transport, follow_redirects=False)  # fmt: skip

    def __repr__(self) -> str:  # no headers, so no key
        return f"OpenAICompatibleLLM(base_url={self.base_url!r}, model={self.model!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    def _body(self, prompt: Prompt, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": prompts.messages(prompt),
                                "max_tokens": prompt.max_tokens, "temperature": 0}  # fmt: skip
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    def _failure(self, reason: str, message: str, **details: Any) -> LLMUnavailable:
        log.warning("LLM %s (%s): %s %s", self.model, self.provider, reason, details or "")
        return LLMUnavailable(f"the answer model {self.model} is unavailable: {message}",
                              details={"provider": self.provider, "model": self.model, "reason": reason, **details},
                              retriable=reason != "rejected")  # fmt: skip

    async def _send(self, prompt: Prompt, stream: bool) -> httpx.Response:
        """A response with status 200 (a streamed one still open: the caller closes it)."""
        body = orjson.dumps(self._body(prompt, stream))
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if stream else "application/json"}
        attempt = 0
        while True:
            try:
                request = self._http.build_request("POST", "/chat/completions", content=body, headers=headers)
                response = await self._http.send(request, stream=True)
            except httpx.TimeoutException:
                raise self._failure("timeout", "it did not answer in time", attempts=attempt + 1) from None
            except httpx.TransportError as exc:
                if attempt >= self.max_retries:
                    raise self._failure("connect", f"it cannot be reached ({type(exc).__name__})",
                                        attempts=attempt + 1) from None  # fmt: skip
                await trio.sleep(self._wait(attempt, None))
                attempt += 1
                continue
            if response.status_code == 200:
                return response
            await self._drain(response)
            status = response.status_code
            if status not in RETRIED:
                raise self._failure("rejected", f"it refused the request (HTTP {status})", status=status,
                                    code=_error_code(response))  # fmt: skip
            retry_after = _retry_after(response)
            reason = "overloaded" if status == 429 else "server_error"
            if attempt >= self.max_retries:
                raise self._failure(reason, f"HTTP {status} after {attempt + 1} attempts", status=status,
                                    attempts=attempt + 1, retry_after=retry_after)  # fmt: skip
            if retry_after is not None and retry_after > self.backoff_max:
                raise self._failure(reason, f"HTTP {status}; it asks to retry after {retry_after:.0f} s",
                                    status=status, attempts=attempt + 1, retry_after=retry_after)  # fmt: skip
            await trio.sleep(self._wait(attempt, retry_after))
            attempt += 1

    def _wait(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(self.backoff_max, self.backoff * 2**attempt)
        return max(backoff, retry_after or 0.0)

    @staticmethod
    async def _drain(response: httpx.Response) -> None:
        try:
            await response.aread()
        except httpx.HTTPError:
            pass
        finally:
            await response.aclose()

    async def complete(self, prompt: Prompt) -> Completion:
        response = await self._send(prompt, stream=False)
        try:
            data = orjson.loads(await response.aread())
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
        except httpx.TimeoutException:
            raise self._failure("timeout", "it did not finish its answer in time") from None
        except httpx.HTTPError as exc:
            raise self._failure("connect", f"the answer was cut off ({type(exc).__name__})") from None
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise self._failure("malformed", "its answer is not a chat completion") from None
        finally:
            await response.aclose()
        return Completion(text=text, model=str(data.get("model") or self.model),
                          usage=_usage(data.get("usage"), prompt, text),
                          finish_reason=str(choice.get("finish_reason") or "stop"))  # fmt: skip

    async def stream(self, prompt: Prompt) -> AsyncIterator[str | Completion]:
        response = await self._send(prompt, stream=True)
        parts: list[str] = []
        usage, model, finish = None, self.model, "stop"
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # comments, event names, blank lines
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = orjson.loads(payload)
                model = chunk.get("model") or model
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    piece = (choice.get("delta") or {}).get("content")
                    finish = choice.get("finish_reason") or finish
                    if piece:
                        parts.append(piece)
                        yield piece
        except httpx.TimeoutException:
            raise self._failure("timeout", "its stream stalled") from None
        except httpx.HTTPError as exc:
            raise self._failure("connect", f"its stream was cut off ({type(exc).__name__})") from None
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            raise self._failure("malformed", "its stream is not chat-completion chunks") from None
        finally:
            await response.aclose()
        text = "".join(parts)
        yield Completion(text=text, model=str(model), usage=_usage(usage, prompt, text), finish_reason=str(finish))


def _usage(block: Any, prompt: Prompt, text: str) -> Usage:
    if isinstance(block, dict) and isinstance(block.get("prompt_tokens"), int):
        return Usage(prompt=block["prompt_tokens"], completion=int(block.get("completion_tokens") or 0),
                     counted_by="provider")  # fmt: skip
    return Usage(prompt=prompts.prompt_tokens(prompt), completion=prompts.count_tokens(text),
                 counted_by=prompts.COUNTED_BY)  # fmt: skip


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_code(response: httpx.Response) -> str | None:
    """The provider's error ``code`` or ``type`` (``invalid_api_key``, ``model_not_found``): a short
    word, never its message."""
    try:
        error = orjson.loads(response.content).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError, httpx.ResponseNotRead):
        return None
    code = error.get("code") or error.get("type") if isinstance(error, dict) else None
    return str(code)[:64] if isinstance(code, str) and code.replace("_", "").isalnum() else None
