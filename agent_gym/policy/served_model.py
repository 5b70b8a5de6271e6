"""What a vLLM server serves: the model directory whose tokenizer a token-in policy needs.

``vllm serve DIR`` (and ``agent-gym serve --model DIR``) names the model by its path: ``GET
/v1/models`` lists it as ``id`` (and ``root``). ``agent-gym serve`` names its embedded default
``agent_gym/tiny-agent`` (:data:`~agent_gym.models.tiny.EMBEDDED_MODEL_NAME`), found by that name.
When that path is a directory on this machine with a tokenizer in it, a client can sample
token-exactly with that tokenizer and chat template without being told where the model is. A model
served from a hub name, or from another machine's disk, has no such directory here: then the
caller must name the tokenizer (``--model PATH``).

Example:
    >>> served_model_dir(["127.0.0.1:8000"])  # doctest: +SKIP
    '/models/tiny_agent'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from agent_gym.errors import ConfigError
from agent_gym.models.tiny import embedded_model_dir

__all__ = ["TOKENIZER_FILES", "served_model_dir", "served_models"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
"""Files of which at least one marks a directory as holding a Hugging Face tokenizer."""


def _url(server: str) -> str:
    return (server if "://" in server else f"http://{server}").rstrip("/")


def served_models(server: str, *, timeout: float = 10.0, api_key: str | None = None) -> list[dict[str, Any]]:
    """The entries of a server's ``GET /v1/models``.

    Raises:
        ConfigError: The server cannot be reached or does not answer a model list.
    """
    url = _url(server) + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        response = httpx.get(url, timeout=timeout, headers=headers)
    except httpx.HTTPError as exc:
        raise ConfigError(f"GET {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ConfigError(f"GET {url}: HTTP {response.status_code} {response.text[:200]}")
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError):
        data = None
    if not isinstance(data, list):
        raise ConfigError(f"GET {url}: expected an OpenAI model list, got {response.text[:200]}")
    return [entry for entry in data if isinstance(entry, dict)]


def _tokenizer_dir(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return None
    embedded = embedded_model_dir(name)  # ``agent-gym serve`` names its default model, not its directory
    if embedded is not None:
        return str(embedded)
    path = Path(name).expanduser()
    try:
        if path.is_dir() and any((path / f).exists() for f in TOKENIZER_FILES):
            return str(path)
    except OSError:  # a name that is no valid path here
        return None
    return None


def served_model_dir(servers: Sequence[str], *, timeout: float = 10.0, api_key: str | None = None) -> str:
    """The local directory of the model the servers serve (its tokenizer and chat template).

    Every server must serve the same model (the first entry of its ``/v1/models``); the name is
    read from ``root``, then ``id``.

    Raises:
        ConfigError: A server cannot be reached, the servers serve different models, or the model
            is not a directory with a tokenizer on this machine (the message says to pass the
            tokenizer's directory, ``--model PATH`` on the command line).
    """
    if not servers:
        raise ConfigError("servers: expected at least one 'IP:PORT' or URL")
    found: dict[str, str] = {}
    names: dict[str, str] = {}
    for server in servers:
        entries = served_models(server, timeout=timeout, api_key=api_key)
        if not entries:
            raise ConfigError(f"{server} serves no model (GET /v1/models listed none)")
        entry = entries[0]
        names[server] = str(entry.get("root") or entry.get("id"))
        local = _tokenizer_dir(entry.get("root")) or _tokenizer_dir(entry.get("id"))
        if local is not None:
            found[server] = str(Path(local).resolve())
    if len(set(names.values())) > 1:
        raise ConfigError("the servers serve different models: "
                          + ", ".join(f"{s} -> {n}" for s, n in names.items()))
    if len(found) != len(servers):
        name = next(iter(names.values()))
        raise ConfigError(f"the servers serve {name!r}, which is not a model directory with a tokenizer on this "
                          "machine: pass the served model's tokenizer directory (--model PATH) for token-exact "
                          "sampling")
    return next(iter(found.values()))
