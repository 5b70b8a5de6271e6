"""``FileSystem``: a small in-memory file tree with shell-like methods (a stateful tool class).

The state is two public attributes: ``cwd`` (the current directory as a list of names
from the root) and ``root`` (nested dicts; a directory is a dict, a file is a str with
its content). Paths given to the methods are names inside the current directory
(``".."`` is the parent for :meth:`FileSystem.cd`).
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["FileSystem"]


class FileSystem:
    """A file tree in memory: ``cd``, ``ls``, ``mkdir``, ``touch``, ``cat``, ``write``, ``rm``, ``mv``, ``cp``..."""

    def __init__(self) -> None:
        self.root: dict[str, Any] = {}
        self.cwd: list[str] = []

    def _load_scenario(self, config: dict[str, Any]) -> None:
        """Load ``{"root": {...}, "cwd": [...]}`` (the task's initial state)."""
        root = config.get("root", {})
        if not isinstance(root, dict):
            raise TypeError(f"root: expected a dict of names to dicts or strings, got {type(root).__name__}")
        _check_tree(root, "root")
        cwd = config.get("cwd", [])
        if not isinstance(cwd, list) or not all(isinstance(p, str) for p in cwd):
            raise TypeError(f"cwd: expected a list of directory names, got {cwd!r}")
        self.root = root
        self.cwd = list(cwd)
        self._here()  # the directory must exist
        unknown = set(config) - {"root", "cwd"}
        if unknown:
            raise ValueError(f"expected keys 'root' and 'cwd', got unknown {sorted(unknown)}")

    def _here(self) -> dict[str, Any]:
        node = self.root
        for name in self.cwd:
            child = node.get(name)
            if not isinstance(child, dict):
                raise ValueError(f"no directory /{'/'.join(self.cwd)}")
            node = child
        return node

    @staticmethod
    def _check_name(name: str) -> None:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"expected a plain file or directory name, got {name!r}")

    def pwd(self) -> str:
        """Show the current directory.

        Returns:
            The absolute path of the current directory.
        """
        return "/" + "/".join(self.cwd)

    def ls(self) -> list[str]:
        """List the current directory (directories end with '/').

        Returns:
            The sorted names in the current directory.
        """
        here = self._here()
        return sorted(n + "/" if isinstance(v, dict) else n for n, v in here.items())

    def cd(self, folder: str) -> str:
        """Change the current directory.

        Args:
            folder: A directory inside the current one, or '..' for the parent.

        Returns:
            The new current directory.
        """
        if folder == "..":
            if not self.cwd:
                raise ValueError("already at the root directory")
            self.cwd.pop()
            return self.pwd()
        if not isinstance(self._here().get(folder), dict):
            raise ValueError(f"no directory {folder!r} in {self.pwd()}")
        self.cwd.append(folder)
        return self.pwd()

    def mkdir(self, dir_name: str) -> str:
        """Create a directory in the current directory.

        Args:
            dir_name: Name of the new directory.
        """
        self._check_name(dir_name)
        here = self._here()
        if dir_name in here:
            raise ValueError(f"{dir_name!r} already exists in {self.pwd()}")
        here[dir_name] = {}
        return f"created directory {dir_name}"

    def touch(self, file_name: str) -> str:
        """Create an empty file in the current directory.

        Args:
            file_name: Name of the new file.
        """
        self._check_name(file_name)
        here = self._here()
        if file_name in here:
            raise ValueError(f"{file_name!r} already exists in {self.pwd()}")
        here[file_name] = ""
        return f"created file {file_name}"

    def cat(self, file_name: str) -> str:
        """Show the content of a file in the current directory.

        Args:
            file_name: The file to read.
        """
        value = self._here().get(file_name)
        if not isinstance(value, str):
            raise ValueError(f"no file {file_name!r} in {self.pwd()}")
        return value

    def write(self, file_name: str, content: str, append: bool = False) -> str:
        """Write text to a file in the current directory (the file is created if missing).

        Args:
            file_name: The file to write.
            content: The text to write.
            append: Add to the end of the file instead of replacing its content.
        """
        self._check_name(file_name)
        here = self._here()
        if isinstance(here.get(file_name), dict):
            raise ValueError(f"{file_name!r} is a directory")
        here[file_name] = (here.get(file_name, "") if append else "") + content
        return f"wrote {len(content)} characters to {file_name}"

    def rm(self, file_name: str) -> str:
        """Remove a file or an empty directory from the current directory.

        Args:
            file_name: The file or directory to remove.
        """
        here = self._here()
        if file_name not in here:
            raise ValueError(f"no {file_name!r} in {self.pwd()}")
        if isinstance(here[file_name], dict) and here[file_name]:
            raise ValueError(f"directory {file_name!r} is not empty")
        del here[file_name]
        return f"removed {file_name}"

    def mv(self, source: str, destination: str) -> str:
        """Move or rename a file or directory of the current directory.

        Args:
            source: Name of the file or directory to move.
            destination: A new name, or an existing directory of the current directory to move it into.
        """
        here = self._here()
        if source not in here:
            raise ValueError(f"no {source!r} in {self.pwd()}")
        target = here.get(destination)
        if isinstance(target, dict):
            if source in target:
                raise ValueError(f"{destination}/{source} already exists")
            target[source] = here.pop(source)
            return f"moved {source} into {destination}"
        self._check_name(destination)
        if destination in here:
            raise ValueError(f"{destination!r} already exists in {self.pwd()}")
        here[destination] = here.pop(source)
        return f"renamed {source} to {destination}"

    def cp(self, source: str, destination: str) -> str:
        """Copy a file of the current directory.

        Args:
            source: Name of the file to copy.
            destination: A new file name, or an existing directory of the current directory to copy it into.
        """
        here = self._here()
        if not isinstance(here.get(source), str):
            raise ValueError(f"no file {source!r} in {self.pwd()}")
        target = here.get(destination)
        if isinstance(target, dict):
            if source in target:
                raise ValueError(f"{destination}/{source} already exists")
            target[source] = here[source]
            return f"copied {source} into {destination}"
        self._check_name(destination)
        if destination in here:
            raise ValueError(f"{destination!r} already exists in {self.pwd()}")
        here[destination] = copy.copy(here[source])
        return f"copied {source} to {destination}"

    def grep(self, file_name: str, pattern: str) -> list[str]:
        """Find the lines of a file that contain a text.

        Args:
            file_name: The file to search.
            pattern: The text to look for (case-sensitive).

        Returns:
            The matching lines.
        """
        return [line for line in self.cat(file_name).splitlines() if pattern in line]

    def wc(self, file_name: str) -> dict[str, int]:
        """Count the lines, words and characters of a file.

        Args:
            file_name: The file to count.
        """
        text = self.cat(file_name)
        return {"lines": len(text.splitlines()), "words": len(text.split()), "characters": len(text)}

    def find(self, name: str) -> list[str]:
        """Find files and directories whose name contains a text, anywhere below the current directory.

        Args:
            name: The text to look for in names.

        Returns:
            Paths relative to the current directory.
        """
        found: list[str] = []

        def walk(node: dict[str, Any], prefix: str) -> None:
            for key in sorted(node):
                path = prefix + key
                if name in key:
                    found.append(path)
                if isinstance(node[key], dict):
                    walk(node[key], path + "/")

        walk(self._here(), "")
        return found


def _check_tree(node: dict[str, Any], where: str) -> None:
    for name, value in node.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"{where}: expected plain names, got {name!r}")
        if isinstance(value, dict):
            _check_tree(value, f"{where}/{name}")
        elif not isinstance(value, str):
            raise TypeError(f"{where}/{name}: expected a dict (directory) or str (file), got {type(value).__name__}")
