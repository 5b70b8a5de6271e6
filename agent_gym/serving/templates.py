"""Chat templates and template arguments a client sends: refused by default, rendered in a cage on opt-in.

A chat template is code: a client's template looping millions of times holds a server for
minutes (the pattern of vLLM's CVE-2025-61620). So, as vLLM does since its fix:

* a template in the request (``chat_template``, or ``chat_template_kwargs.chat_template``) is
  refused with a 400 unless the server runs with ``--trust-request-chat-template``;
* template arguments (``chat_template_kwargs``) are variables of the server's own template: by
  default only scalars are taken (booleans, numbers, strings up to :data:`MAX_KWARG_CHARS`,
  at most :data:`MAX_KWARGS` of them, never the names of ``apply_chat_template``'s own
  parameters); lists and objects need the opt-in too.

With the opt-in, :func:`render_in_sandbox` renders a client's template with Jinja's
``ImmutableSandboxedEnvironment`` in a child process bounded in CPU time, wall time, memory and
output size, so a hostile template costs at most those bounds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_gym.errors import RequestError

__all__ = [
    "MAX_KWARGS",
    "MAX_KWARG_CHARS",
    "RESERVED_KWARGS",
    "TemplateLimits",
    "check_template_kwargs",
    "render_in_sandbox",
]

MAX_KWARGS = 16
"""Most template arguments taken from a request."""

MAX_KWARG_CHARS = 1024
"""Longest string template argument taken without the opt-in."""

RESERVED_KWARGS = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs",
})
"""Parameters of ``apply_chat_template`` a request's template arguments may not set."""

TRUST_FLAG = "--trust-request-chat-template"


@dataclass(frozen=True)
class TemplateLimits:
    """Bounds of one sandboxed template rendering.

    Attributes:
        cpu_s: CPU seconds of the rendering process.
        wall_s: Wall-clock seconds before it is killed.
        memory_bytes: Its address-space limit.
        output_bytes: Longest rendered text.
    """

    cpu_s: int = 2
    wall_s: float = 5.0
    memory_bytes: int = 1024 * 2**20
    output_bytes: int = 8 * 2**20


def _scalar(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= MAX_KWARG_CHARS
    return value is None or isinstance(value, (bool, int, float))


def check_template_kwargs(kwargs: Any, *, trust: bool, template: Any = None) -> tuple[dict[str, Any], str | None]:
    """The template arguments and client template a request may use (see the module docs).

    Args:
        kwargs: The request's ``chat_template_kwargs`` (None for none).
        trust: The server runs with ``--trust-request-chat-template``.
        template: The request's own ``chat_template`` field (vLLM's), if any.

    Returns:
        ``(kwargs, template)``: the arguments without ``chat_template``, and the client's template
        (None: the server's own).

    Raises:
        RequestError: A client template without the opt-in, or arguments the rules refuse (400).
    """
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise RequestError(f"chat_template_kwargs: expected an object, got {type(kwargs).__name__}",
                           param="chat_template_kwargs")
    if len(kwargs) > MAX_KWARGS:
        raise RequestError(f"chat_template_kwargs: expected at most {MAX_KWARGS} arguments, got {len(kwargs)}",
                           param="chat_template_kwargs")
    out = dict(kwargs)
    inner = out.pop("chat_template", None)
    if template is not None and inner is not None:
        raise RequestError("chat_template: given twice (the field and chat_template_kwargs.chat_template)",
                           param="chat_template")
    client_template = template if template is not None else inner
    if client_template is not None:
        if not trust:
            raise RequestError("chat_template: a chat template sent with the request is refused (templates are "
                               f"code); the server's operator can allow them with {TRUST_FLAG}",
                               param="chat_template")
        if not isinstance(client_template, str) or not client_template.strip():
            raise RequestError("chat_template: expected a Jinja template string", param="chat_template")
    for key, value in out.items():
        if not isinstance(key, str) or not key.isidentifier() or key.startswith("_"):
            raise RequestError(f"chat_template_kwargs: expected identifier names, got {key!r}",
                               param="chat_template_kwargs")
        if key in RESERVED_KWARGS:
            raise RequestError(f"chat_template_kwargs.{key}: a parameter of the template call, not a template "
                               "variable; it cannot be set by a request", param="chat_template_kwargs")
        if not trust and not _scalar(value):
            raise RequestError(f"chat_template_kwargs.{key}: expected a boolean, number, null or a string of at most "
                               f"{MAX_KWARG_CHARS} characters, got {type(value).__name__} (lists, objects and "
                               f"longer strings need {TRUST_FLAG})", param="chat_template_kwargs")
    return out, client_template


_RENDER = r"""
import json, os, resource, sys
limits = json.loads(sys.argv[1])
sys.path[:0] = sys.argv[2].split(os.pathsep)
resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
job = json.loads(sys.stdin.buffer.read())
def raise_exception(message):
    raise TemplateError(message)
def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
try:
    text = env.from_string(job["template"]).render(**job["variables"])
except Exception as exc:
    sys.stderr.write(f"{type(exc).__name__}: {exc}"[:2000])
    sys.exit(3)
data = text.encode("utf-8", "surrogatepass")
if len(data) > limits["output_bytes"]:
    sys.stderr.write(f"the rendered prompt is longer than {limits['output_bytes']} bytes")
    sys.exit(4)
sys.stdout.buffer.write(data)
"""


def render_in_sandbox(template: str, messages: Sequence[Mapping[str, Any]], *, tools: Any = None,
                      add_generation_prompt: bool = True, special_tokens: Mapping[str, Any] | None = None,
                      kwargs: Mapping[str, Any] | None = None, limits: TemplateLimits | None = None) -> str:
    """Render a client's chat template in a bounded child process (blocking; run it off the event loop).

    Args:
        template: The Jinja template.
        messages: The conversation.
        tools: Tool schemas given to the template.
        add_generation_prompt: The template's ``add_generation_prompt``.
        special_tokens: ``bos_token``, ``eos_token``, ... given to the template.
        kwargs: More template variables.
        limits: The bounds (default :class:`TemplateLimits`).

    Returns:
        The rendered prompt text.

    Raises:
        RequestError: The template failed, ran past a bound or rendered too much (400).
    """
    limits = limits or TemplateLimits()
    variables = {**dict(special_tokens or {}), **dict(kwargs or {}), "messages": list(messages), "tools": tools,
                 "add_generation_prompt": add_generation_prompt}
    job = json.dumps({"template": template, "variables": variables}, default=str).encode()
    bounds = json.dumps({"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_bytes,
                         "output_bytes": limits.output_bytes})
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _RENDER, bounds, _jinja_path()], input=job,
                              capture_output=True, timeout=limits.wall_s, check=False, env={})
    except subprocess.TimeoutExpired:
        raise RequestError(f"chat_template: rendering ran past {limits.wall_s:g} s and was stopped",
                           param="chat_template") from None
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        detail = reason[-1] if reason else f"the renderer was stopped (exit {done.returncode}: CPU or memory bound)"
        raise RequestError(f"chat_template: rendering failed: {detail[:500]}", param="chat_template")
    return done.stdout.decode("utf-8", "surrogatepass")


def _jinja_path() -> str:
    """The directory holding ``jinja2`` and ``markupsafe`` (the child runs isolated, without site-packages)."""
    import os

    import jinja2
    import markupsafe

    dirs = {os.path.dirname(os.path.dirname(jinja2.__file__)), os.path.dirname(os.path.dirname(markupsafe.__file__))}
    return os.pathsep.join(sorted(dirs))
