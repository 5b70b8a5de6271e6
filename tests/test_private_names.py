"""No module of agent_gym imports a private name (``_x``) from another module of the package.

Every module under ``agent_gym/`` is parsed with :mod:`ast`; every import statement counts,
wherever it stands (module level, functions, ``if TYPE_CHECKING:`` blocks). A name another module
needs is public: give it a name without the underscore and list it in its module's ``__all__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agent_gym

PACKAGE_DIR = Path(agent_gym.__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
PACKAGE = PACKAGE_DIR.name


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_parts(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _absolute(node: ast.ImportFrom, path: Path, root: Path) -> str:
    """The absolute module name of a ``from ... import`` (relative ones resolved against ``path``)."""
    if not node.level:
        return node.module or ""
    package = _module_parts(path, root)
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``"file:line: what"`` for each private name ``path`` imports from another agent_gym module.

    Args:
        path: A module of the package.
        root: The folder holding the package (module names are relative to it).
    """
    own = ".".join(_module_parts(path, root))
    found = []
    where = path.relative_to(root).as_posix()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(node, path, root)
            if module != PACKAGE and not module.startswith(PACKAGE + "."):
                continue
            if module == own:
                continue
            private_module = any(_is_private(part) for part in module.split("."))
            for alias in node.names:
                if private_module or _is_private(alias.name):
                    found.append(f"{where}:{node.lineno}: from {module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE and any(_is_private(part) for part in parts):
                    found.append(f"{where}:{node.lineno}: import {alias.name}")
    return found


def test_finder_sees_every_form(tmp_path):
    """The finder reports private names in absolute, relative and function-level imports."""
    source = (
        "from agent_gym.policy.chat_tokens import ChatTokenBuilder, _normalize\n"
        "from .routing import _private_thing\n"
        "from . import _hidden_module\n"
        "import agent_gym.sandbox._driver\n"
        "def f():\n"
        "    from agent_gym.policy.sampling import _range_text\n"
        "    from agent_gym.policy.sampling import __all__\n"
        "    from json import _default_decoder\n"
    )
    # Parse the source as if it stood in agent_gym/policy/ (nothing is written into the package).
    fake = tmp_path / PACKAGE / "policy" / "fake_module_for_test.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(source)
    found = sorted(private_imports(fake, tmp_path), key=lambda line: int(line.split(":")[1]))
    assert [line.split(": ", 1)[1] for line in found] == [
        "from agent_gym.policy.chat_tokens import _normalize",
        "from agent_gym.policy.routing import _private_thing",
        "from agent_gym.policy import _hidden_module",
        "import agent_gym.sandbox._driver",
        "from agent_gym.policy.sampling import _range_text",
    ]
    assert found[0].startswith("agent_gym/policy/fake_module_for_test.py:1: ")
    assert found[-1].startswith("agent_gym/policy/fake_module_for_test.py:6: ")



def test_no_private_name_crosses_modules():
    """Each crossing is listed as ``file:line: from module import _name``."""
    crossings = [line for path in sorted(PACKAGE_DIR.rglob("*.py")) for line in private_imports(path)]
    assert not crossings, (
        f"{len(crossings)} private name(s) imported from another agent_gym module "
        "(make them public, or keep them in one module):\n" + "\n".join(crossings)
    )
