"""A key-value notes MCP server: the server of agent_gym's MCP examples, tests and benchmark.

Tools: ``put_note(key, text)``, ``get_note(key)``, ``delete_note(key)``, ``list_notes()``,
``note_stats()`` (structured content: the number of notes, the calls served and the server's
process id) and ``note_card(key)`` (a note drawn as a small PNG image). Reading a missing note is
a tool error (``isError``).

The store lives in the server process. Over stdio a process serves one client; over streamable
HTTP every MCP session (``Mcp-Session-Id``) gets a store of its own, so one server isolates many
episodes. Run it with::

    python -m agent_gym.tools.mcp.servers.notes                 # stdio
    python -m agent_gym.tools.mcp.servers.notes --http --port 8765  # streamable HTTP at /mcp

The module imports only the standard library and ``mcp`` (1.x or 2.x: the high-level server
class is ``mcp.server.mcpserver.MCPServer`` in 2.x and ``mcp.server.fastmcp.FastMCP`` in 1.x), so
it also runs as a plain file under an interpreter without agent_gym.
"""

# No ``from __future__ import annotations``: the SDK reads the tools' annotations, Context included.
import argparse
import importlib
import os
import struct
import sys
import zlib
from collections.abc import Sequence
from typing import Any

__all__ = ["SERVER_NAME", "SERVER_VERSION", "build_server", "main", "png_bar"]

SERVER_NAME = "agent-gym-notes"
"""The ``serverInfo.name`` the server reports."""

SERVER_VERSION = "1.0"
"""The ``serverInfo.version`` the server reports (clients cache its tool list under it)."""


def _server_classes() -> tuple[type, type, type, type]:
    """The installed SDK's server class, request context, image helper and tool error (2.x names first)."""
    try:
        from mcp.server.mcpserver import Context, MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp.server.mcpserver.utilities.types import Image
    except ImportError:  # mcp 1.x: the same classes under their 1.x names
        fastmcp = importlib.import_module("mcp.server.fastmcp")
        exceptions = importlib.import_module("mcp.server.fastmcp.exceptions")
        utilities = importlib.import_module("mcp.server.fastmcp.utilities.types")
        return fastmcp.FastMCP, fastmcp.Context, utilities.Image, exceptions.ToolError
    return MCPServer, Context, Image, ToolError


def png_bar(width: int, height: int = 8) -> bytes:
    """A ``width`` x ``height`` grey PNG (a bar as long as a note), encoded without extra packages."""
    width, height = max(1, min(width, 512)), max(1, height)
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _session_key(ctx: Any) -> str:
    """The MCP session a request belongs to (``""`` over stdio, where a process serves one client)."""
    headers = getattr(ctx, "headers", None)  # 2.x
    if headers is None:
        request = getattr(getattr(ctx, "request_context", None), "request", None)  # 1.x: the HTTP request
        headers = getattr(request, "headers", None)
    if not headers:
        return ""
    return str(headers.get("mcp-session-id") or "")


def build_server(name: str = SERVER_NAME, **settings: Any) -> Any:
    """The notes server (an ``MCPServer``, or a ``FastMCP`` under mcp 1.x) with its tools registered.

    Args:
        name: The server's name.
        **settings: Passed to the server class (e.g. ``host``/``port`` under mcp 1.x).
    """
    server_class, Context, image_class, tool_error = _server_classes()  # noqa: N806 - a class
    settings.setdefault("log_level", "ERROR")
    try:
        server = server_class(name, version=SERVER_VERSION, **settings)
    except TypeError:  # 1.x FastMCP takes no version
        server = server_class(name, **settings)
    stores: dict[str, dict[str, str]] = {}
    calls = {"count": 0}

    def store(ctx: Any) -> dict[str, str]:
        calls["count"] += 1
        return stores.setdefault(_session_key(ctx), {})

    @server.tool(description="Save a note under a key (replacing the note saved there before).")
    def put_note(key: str, text: str, ctx: Context) -> str:  # type: ignore[valid-type]
        """Save a note under a key (replacing the note saved there before).

        Args:
            key: The note's name.
            text: The note.
            ctx: The request's context (filled in by the SDK).
        """
        store(ctx)[key] = text
        return f"saved {key!r} ({len(text)} characters)"

    @server.tool(description="Read the note saved under a key.")
    def get_note(key: str, ctx: Context) -> str:  # type: ignore[valid-type]
        """Read the note saved under a key.

        Args:
            key: The note's name.
            ctx: The request's context (filled in by the SDK).
        """
        notes = store(ctx)
        if key not in notes:
            raise tool_error(f"no note named {key!r}; saved notes: {sorted(notes) or 'none'}")
        return notes[key]

    @server.tool(description="Delete the note saved under a key.")
    def delete_note(key: str, ctx: Context) -> str:  # type: ignore[valid-type]
        """Delete the note saved under a key.

        Args:
            key: The note's name.
            ctx: The request's context (filled in by the SDK).
        """
        found = store(ctx).pop(key, None) is not None
        return f"deleted {key!r}" if found else f"no note named {key!r}"

    @server.tool(description="The names of the saved notes, sorted.")
    def list_notes(ctx: Context) -> list[str]:  # type: ignore[valid-type]
        """The names of the saved notes, sorted.

        Args:
            ctx: The request's context (filled in by the SDK).
        """
        return sorted(store(ctx))

    @server.tool(description="How many notes are saved, how many calls the server served, and its process id.")
    def note_stats(ctx: Context) -> dict[str, int]:  # type: ignore[valid-type]
        """How many notes are saved, how many calls the server served, and its process id.

        Args:
            ctx: The request's context (filled in by the SDK).
        """
        notes = store(ctx)
        return {"notes": len(notes), "calls": calls["count"], "pid": os.getpid()}

    @server.tool(description="The note saved under a key drawn as a grey bar image as long as the note.")
    def note_card(key: str, ctx: Context) -> Any:  # type: ignore[valid-type]
        """The note saved under a key drawn as a bar image as long as the note.

        Args:
            key: The note's name.
            ctx: The request's context (filled in by the SDK).
        """
        notes = store(ctx)
        if key not in notes:
            raise tool_error(f"no note named {key!r}")
        return image_class(data=png_bar(len(notes[key])), format="png")

    return server


def main(argv: Sequence[str] | None = None) -> int:
    """Run the notes server over stdio (default) or streamable HTTP (``--http``)."""
    parser = argparse.ArgumentParser(description="The agent_gym notes MCP server.")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    if not args.http:
        build_server().run("stdio")
        return 0
    server = build_server()
    try:
        server.run("streamable-http", host=args.host, port=args.port)
    except TypeError:  # 1.x takes host and port as settings
        build_server(host=args.host, port=args.port).run("streamable-http")
    return 0


if __name__ == "__main__":
    sys.exit(main())
