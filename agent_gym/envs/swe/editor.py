"""``str_replace_editor``: view and edit files in a sandbox with SWE-agent's command and argument names.

Commands (``command``): ``view`` (a file with line numbers, optionally ``view_range=[start, end]``,
``end`` -1 for the end of the file; or a directory two levels deep), ``create`` (``file_text``; the
file must not exist), ``str_replace`` (``old_str`` must occur exactly once; ``new_str``, default
empty), ``insert`` (``new_str`` after line ``insert_line``, 0 for the top) and ``undo_edit`` (the
last edit of ``path`` undone). Paths are absolute. Every mistake comes back as a message saying
what to change (with the line numbers where ``old_str`` occurs more than once); the editor never
raises for its input. After an edit the lines around it are shown.
"""

from __future__ import annotations

import shlex
from typing import Any

from agent_gym.errors import SandboxError

__all__ = ["COMMANDS", "FileEditor"]

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
"""The editor's commands."""

_SNIPPET_LINES = 4
_MAX_FILE_BYTES = 4 << 20
_MAX_HISTORY = 20


def _numbered(text: str, first: int) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.split("\n"), start=first))


class FileEditor:
    """The editor of one sandbox (keeps each file's edit history for ``undo_edit``).

    Args:
        sandbox: The episode's sandbox (``read_file``, ``write_file``, ``exec``).
        max_output_chars: Longest view returned (longer ones are cut with a note).
    """

    def __init__(self, sandbox: Any, max_output_chars: int = 16000) -> None:
        self.sandbox = sandbox
        self.max_output_chars = max_output_chars
        self.history: dict[str, list[str]] = {}
        self._modes: dict[str, int] = {}

    def str_replace_editor(
        self,
        command: str,
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> str:
        """View, create and edit files. Paths are absolute, e.g. /app/pkg/module.py.

        Args:
            command: One of view, create, str_replace, insert, undo_edit.
            path: Absolute path of the file or directory.
            file_text: The content of the new file (create).
            old_str: The exact text to replace; it must occur exactly once in the file (str_replace).
            new_str: The replacement text (str_replace) or the text to insert (insert).
            insert_line: Insert new_str after this line; 0 inserts at the top (insert).
            view_range: [start, end] line numbers to view, 1-based; end -1 views to the end (view of a file).

        Returns:
            The file's lines with line numbers, a directory listing, or what changed.
        """
        if self.sandbox is None:
            return "Error: no sandbox (this environment was copied or closed); call reset()."
        if command not in COMMANDS:
            return f"Error: unknown command {command!r}; use one of {', '.join(COMMANDS)}."
        if not isinstance(path, str) or not path.startswith("/"):
            return f"Error: the path {path!r} is not absolute; give an absolute path such as /app/{path or 'file.py'}."
        path = "/" + "/".join(p for p in path.split("/") if p and p != ".")
        try:
            kind = self._kind(path)
            if command == "create":
                return self._create(path, kind, file_text)
            if kind == "missing":
                return f"Error: the path {path} does not exist; create it with command=create."
            if command == "view":
                return self._view(path, kind, view_range)
            if kind == "dir":
                return f"Error: {path} is a directory; only view works on directories."
            if command == "str_replace":
                return self._str_replace(path, old_str, new_str)
            if command == "insert":
                return self._insert(path, new_str, insert_line)
            return self._undo(path)
        except SandboxError as exc:
            return f"Error: {exc}"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["sandbox"] = None  # a sandbox's processes cannot be copied
        return state

    # ------------------------------------------------------------------ commands

    def _kind(self, path: str) -> str:
        q = shlex.quote(path)
        result = self.sandbox.exec(f"if [ -d {q} ]; then echo dir; elif [ -f {q} ]; then echo file $(stat -c %a {q}); "
                                   f"elif [ -e {q} ]; then echo other; else echo missing; fi", timeout=30)
        words = (result.output.strip().splitlines() or ["missing"])[-1].split()
        if words[0] == "file" and len(words) == 2:
            try:
                self._modes[path] = int(words[1], 8)
            except ValueError:
                pass
        return words[0]

    def _read(self, path: str) -> str:
        data = self.sandbox.read_file(path, limit=_MAX_FILE_BYTES + 1) if _accepts_limit(self.sandbox) \
            else self.sandbox.read_file(path)
        if len(data) > _MAX_FILE_BYTES:
            raise SandboxError(f"{path} is larger than {_MAX_FILE_BYTES} bytes; use bash to look at it")
        if b"\0" in data[:8192]:
            raise SandboxError(f"{path} looks binary; use bash to look at it")
        return data.decode("utf-8", "replace")

    def _write(self, path: str, text: str) -> None:
        self.sandbox.write_file(path, text.encode("utf-8"), self._modes.get(path, 0o644))

    def _remember(self, path: str, text: str) -> None:
        stack = self.history.setdefault(path, [])
        stack.append(text)
        del stack[:-_MAX_HISTORY]

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_output_chars:
            return text
        return text[: self.max_output_chars] + "\n[output cut; view a smaller view_range]"

    def _view(self, path: str, kind: str, view_range: list[int] | None) -> str:
        if kind == "dir":
            if view_range is not None:
                return "Error: view_range works on files only, not on directories."
            result = self.sandbox.exec(f"find {shlex.quote(path)} -maxdepth 2 -not -path '*/.*' | sort", timeout=30)
            return self._cut(f"Files and directories up to 2 levels deep in {path} (hidden ones left out):\n"
                             + result.output.rstrip())
        if kind != "file":
            return f"Error: {path} is not a regular file."
        lines = self._read(path).split("\n")
        first, last = 1, len(lines)
        if view_range is not None:
            if (not isinstance(view_range, list) or len(view_range) != 2
                    or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)):
                return f"Error: view_range must be two integers [start, end], got {view_range!r}."
            first, end = view_range
            if not 1 <= first <= len(lines):
                return f"Error: view_range start {first} is outside the file's lines 1 to {len(lines)}."
            if end == -1:
                end = len(lines)
            if end < first or end > len(lines):
                return (f"Error: view_range end {end} must be -1 or between the start {first} and the "
                        f"file's last line {len(lines)}.")
            last = end
        shown = _numbered("\n".join(lines[first - 1:last]), first)
        return self._cut(f"Here is {path} (lines {first}-{last} of {len(lines)}):\n{shown}")

    def _create(self, path: str, kind: str, file_text: str | None) -> str:
        if file_text is None:
            return "Error: create needs file_text, the content of the new file."
        if kind != "missing":
            return f"Error: {path} already exists; edit it with str_replace or insert (create never overwrites)."
        self._write(path, file_text)
        self._remember(path, "")
        self.history[path][-1] = "\0created"
        return f"Created {path} ({len(file_text.splitlines())} lines)."

    def _snippet(self, text: str, first_line: int, changed_lines: int) -> str:
        lines = text.split("\n")
        start = max(1, first_line - _SNIPPET_LINES)
        end = min(len(lines), first_line + changed_lines + _SNIPPET_LINES)
        return _numbered("\n".join(lines[start - 1:end]), start)

    def _str_replace(self, path: str, old_str: str | None, new_str: str | None) -> str:
        if old_str is None or old_str == "":
            return "Error: str_replace needs old_str, the exact non-empty text to replace."
        new = new_str or ""
        text = self._read(path)
        count = text.count(old_str)
        if count == 0:
            return (f"Error: old_str was not found in {path}; nothing changed. It must match the file exactly, "
                    "including whitespace and indentation (view the file to copy it).")
        if count > 1:
            starts = []
            index = text.find(old_str)
            while index != -1:
                starts.append(text.count("\n", 0, index) + 1)
                index = text.find(old_str, index + 1)
            return (f"Error: old_str occurs {count} times in {path}, at lines {starts}; nothing changed. "
                    "Include more surrounding lines to make it unique.")
        self._remember(path, text)
        index = text.index(old_str)
        updated = text[:index] + new + text[index + len(old_str):]
        self._write(path, updated)
        line = text.count("\n", 0, index) + 1
        replaced = old_str.count("\n") + 1
        return (f"Edited {path}: replaced {replaced} line(s) at line {line}. The lines around it now:\n"
                + self._snippet(updated, line, new.count("\n")))

    def _insert(self, path: str, new_str: str | None, insert_line: int | None) -> str:
        if new_str is None:
            return "Error: insert needs new_str, the text to insert."
        if insert_line is None or isinstance(insert_line, bool) or not isinstance(insert_line, int):
            return "Error: insert needs insert_line, the line number after which to insert (0 for the top)."
        text = self._read(path)
        lines = text.split("\n")
        if not 0 <= insert_line <= len(lines):
            return f"Error: insert_line {insert_line} is outside 0 to {len(lines)} (the file has {len(lines)} lines)."
        self._remember(path, text)
        new_lines = new_str.split("\n")
        updated = "\n".join(lines[:insert_line] + new_lines + lines[insert_line:])
        self._write(path, updated)
        return (f"Inserted {len(new_lines)} line(s) after line {insert_line} of {path}. The lines around it now:\n"
                + self._snippet(updated, insert_line + 1, len(new_lines)))

    def _undo(self, path: str) -> str:
        stack = self.history.get(path)
        if not stack:
            return f"Error: there is no edit of {path} to undo."
        previous = stack.pop()
        if previous == "\0created":
            self.sandbox.exec(f"rm -f -- {shlex.quote(path)}", timeout=30)
            return f"Undid the creation of {path} (the file is removed)."
        self._write(path, previous)
        return f"Undid the last edit of {path}. It now reads:\n" + self._cut(_numbered(previous, 1))


def _accepts_limit(sandbox: Any) -> bool:
    import inspect

    try:
        return "limit" in inspect.signature(sandbox.read_file).parameters
    except (TypeError, ValueError):
        return False
