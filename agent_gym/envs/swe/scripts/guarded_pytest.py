"""The SWE-v0 grader's test run: pytest in a guarded child process, the verdict written by its parent.

Run inside the grading sandbox as ``python3 -s -B guarded_pytest.py CONFIG`` (nothing of the
repository has run yet). The program imports pytest and every plugin pytest loads by default
*before* the repository is on ``sys.path``, then forks:

* **The child** (new session, output into a pipe) waits for its parent, installs the guard (below),
  puts the repository first on ``sys.path`` (as ``python -m pytest`` would, then ``PYTHONPATH``) and
  runs ``pytest.main`` with the grader's reporter. It leaves with ``os._exit`` (no exit handler runs).
* **The parent** never runs code of the repository. It reads the per-run key of the verdict from a
  file and deletes it, makes itself undumpable (no process of the sandbox user can read its memory or
  its file descriptors), releases the child, and reads the reporter's records from a pipe: each
  record is authenticated with a key only the child's guard holds, numbered, and the first ``end``
  record closes the run (nothing after it counts). When the child is gone it checks that the test
  files are as they were, and writes the verdict (JSON, then an HMAC-SHA256 of it under the run's
  key) to the verdict file. Nothing the child or its descendants write can pass as a verdict: they
  never see the run's key.

The guard (:func:`_guard`) is an audit hook (which no Python code can remove) plus the reporter
plugin. The hook signs the reporter's records, and only for records raised by the reporter's own
functions on a stack of the runner's code alone, reached from this program and, for test results,
through ``_pytest.runner.call_and_report`` with the item pytest collected. Before it signs it checks
that the runner is as it was imported: the namespaces of the runner's modules and classes (every one
at collection's end and at the session's end, the reporting path at every result), the hook
implementations of the reporting hooks, and the collected items' test functions. A test reported
passed must have been seen, by the reporter's innermost wrappers of ``pytest_runtest_call`` and
``pytest_pyfunc_call``, to return without raising. The hook also refuses to library code of the
repository what it would need to reach the runner's objects or secrets (frames, the garbage
collector's object lists, ``ctypes``, tracing, code objects made by hand, writes to test files,
configuration files or bytecode caches, ``/proc/*/mem``) and checks that every test file and
``conftest.py`` pytest compiles has the content it had before the run. Whatever it refuses or finds
is a signed ``violation`` record; in ``enforce`` mode (the patched run) the refused operation also
raises, except for what the base run did too (``tolerated``: the same kind at the same place).

The hook and the reporter read no global name (every builtin they use is bound when the guard is
built), call no Python code of modules a patch could change while they check, and keep their state
in closures no object of the run refers to.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]

EMIT = "agent_gym.swe.emit"
OBSERVE = "agent_gym.swe.observe"
VERDICT_MARK = "AGENT_GYM_SWE_VERDICT"


def _digests(paths, sha256):
    """``{absolute path: sha256 hex}`` of the files that exist among ``paths``."""
    found = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                found[path] = sha256(f.read()).hexdigest()
        except OSError:
            continue
    return found


def _hmac_function():
    """``hmac_digest(key, message, "sha256") -> bytes``: OpenSSL's (a C function), else the ``hmac`` module's."""
    try:
        from _hashlib import hmac_digest

        return hmac_digest
    except ImportError:  # pragma: no cover - interpreters without OpenSSL's HMAC
        import hmac

        return lambda key, message, digest: hmac.new(key, message, digest).digest()


def _undumpable():
    """Make this process undumpable (``prctl(PR_SET_DUMPABLE, 0)``): others cannot read its memory or descriptors."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
        return True
    except Exception:  # pragma: no cover - not Linux, or no libc
        return False


def _runner_modules():
    """The runner's modules (pytest, its plugins, pluggy), imported now."""
    import importlib

    import _pytest.config

    names = list(getattr(_pytest.config, "essential_plugins", ())) + list(getattr(_pytest.config, "default_plugins",
                                                                                   ()))
    for name in names + ["runner", "reports", "python", "outcomes", "main", "nodes", "fixtures", "skipping",
                         "unittest", "doctest", "assertion.rewrite", "assertion.util", "_code.code", "pathlib"]:
        try:
            importlib.import_module("_pytest." + name)
        except Exception:
            continue
    return [module for key, module in sorted(sys.modules.items())
            if module is not None
            and (key in ("pytest", "pluggy", "_pytest") or key.startswith(("_pytest.", "pluggy.")))]


def _guard(config, key, record_fd, digests, script, main_code):
    """Install the audit hook and return the reporter plugin (see the module docstring)."""
    import _thread
    import inspect
    import logging
    import operator
    import site
    import sysconfig
    import traceback
    import types

    import _pytest.outcomes
    import _pytest.runner
    import pluggy
    import pytest

    _hmac_digest = _hmac_function()

    # every builtin and C function the hook and the reporter use, bound now
    _is, _len, _type, _str, _repr, _int, _bool = operator.is_, len, type, str, repr, int, bool
    _tuple, _list, _map, _all, _any, _zip, _iter, _next = tuple, list, map, all, any, zip, iter, next
    _dict_get, _RuntimeError, _Exception, _OSError = dict.get, RuntimeError, Exception, OSError
    _getattr, _isinstance, _bytes, _dict, _typetype = getattr, isinstance, bytes, dict, type
    _emit, _observe = EMIT, OBSERVE
    _write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    _realpath, _dirname = os.path.realpath, os.path.dirname
    _getframe, _audit, _get_ident, _write = sys._getframe, sys.audit, _thread.get_ident, os.write
    _stat, _getcwd = os.stat, os.getcwd
    _object_getattribute = object.__getattribute__
    _type_dict = type.__dict__["__dict__"].__get__
    _type_mro = type.__dict__["__mro__"].__get__
    _type_qualname = type.__dict__["__qualname__"].__get__
    _str_startswith, _str_endswith, _str_split, _str_join = str.startswith, str.endswith, str.split, str.join
    _str_rsplit, _str_find, _str_encode = str.rsplit, str.find, str.encode
    _bytes_hex = bytes.hex
    _set_add, _set_discard = set.add, set.discard
    _list_append = list.append
    _FunctionType, _MethodType, _CodeType, _ModuleType = (types.FunctionType, types.MethodType, types.CodeType,
                                                          types.ModuleType)
    _has_qualname = hasattr(main_code, "co_qualname")
    from _hashlib import openssl_sha256 as _sha256

    main_tid = _get_ident()
    mode = config.get("mode", "enforce")
    enforce = mode == "enforce"
    tolerated = frozenset(config.get("tolerated") or ())
    repo = os.path.realpath(config["repo"])
    repo_prefix = repo + "/"
    private_prefix = os.path.realpath(config["private"]).rstrip("/") + "/"
    Skipped = _pytest.outcomes.Skipped
    XFailed = getattr(_pytest.outcomes, "XFailed", None)
    car_code = _pytest.runner.call_and_report.__code__

    def _prefixes(paths):
        out = []
        for p in paths:
            if p:
                real = _realpath(p)
                for q in {p, real}:
                    out.append(q.rstrip("/") + "/")
        return _tuple(out)

    runner_prefixes = _prefixes([os.path.dirname(pytest.__file__) if _str_endswith(pytest.__file__, "__init__.py")
                                 else "", os.path.dirname(_pytest.__file__), os.path.dirname(pluggy.__file__)])
    pytest_file = os.path.realpath(pytest.__file__)
    paths = sysconfig.get_paths()
    installed_prefixes = _prefixes(list(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
                                   + [paths.get("purelib", ""), paths.get("platlib", "")]
                                   + [p for p in sys.path if "-packages" in p])
    stdlib_prefixes = _prefixes([paths.get("stdlib", ""), paths.get("platstdlib", ""), os.path.dirname(os.__file__)])
    script_real = os.path.realpath(script)
    RUNNER, INSTALLED, STDLIB, TEST, LIBRARY, UNKNOWN = "runner", "installed", "stdlib", "test", "library", "unknown"

    def _is_test_rel(rel):
        parts = _str_split(rel, "/")
        name = parts[-1]
        if name == "conftest.py":
            return True
        if (_str_startswith(name, "test_") and _str_endswith(name, ".py")) or _str_endswith(name, "_test.py"):
            return True
        for part in parts[:-1]:
            if part == "tests" or part == "test" or part == "testing":
                return True
        return False

    kinds = {}
    _kinds_get = kinds.get

    def kind_of(filename):
        found = _kinds_get(filename)
        if found is not None:
            return found
        if _type(filename) is not _str:
            result = UNKNOWN
        elif filename == script or filename == script_real or filename == pytest_file:
            result = RUNNER
        elif _any(_map(filename.startswith, runner_prefixes)):
            result = RUNNER
        elif _str_startswith(filename, "<frozen "):
            result = STDLIB
        elif _any(_map(filename.startswith, installed_prefixes)):
            result = INSTALLED
        elif _any(_map(filename.startswith, stdlib_prefixes)):
            result = STDLIB
        elif _str_startswith(filename, repo_prefix):
            result = TEST if _is_test_rel(filename[_len(repo_prefix):]) else LIBRARY
        else:
            result = UNKNOWN
        kinds[filename] = result
        return result

    def where(frame):
        code = frame.f_code
        name = code.co_qualname if _has_qualname else code.co_name
        filename = code.co_filename
        if _type(filename) is _str and _str_startswith(filename, repo_prefix):
            filename = filename[_len(repo_prefix):]
        return f"{filename}:{name}"

    leaking = _tuple(f.__code__ for f in (inspect.currentframe, inspect.stack, inspect.trace, inspect.getouterframes,
                                           inspect.getinnerframes, traceback.walk_tb, traceback.walk_stack,
                                           logging.currentframe) if _type(f) is _FunctionType)

    def is_leaking(code):
        for c in leaking:
            if _is(c, code):
                return True
        return False

    # ------------------------------------------------------------------ the record channel

    state = {"seq": 0, "ended": False}

    def exact(value):
        """``value`` as an exact str, int, bool or None (so that its ``repr`` is a literal)."""
        t = _type(value)
        if t is _str or t is _int or t is _bool or value is None:
            return value
        if _isinstance(value, _str):
            return _str_join("", [value])
        if _isinstance(value, _int):
            return _int(value)
        return "?"

    def send(payload):
        text = _repr(_tuple(_map(exact, payload)))
        seq = state["seq"]
        state["seq"] = seq + 1
        body = _str_encode(f"{seq} {text}")
        mac = _bytes_hex(_hmac_digest(key, body, "sha256"))
        data = _str_encode(f"{seq} {mac} {text}\n")
        while data:
            try:
                data = data[_write(record_fd, data):]
            except _OSError:
                return

    reported = set()

    def violation(kind, place, detail, prevent=False):
        key_ = f"{kind}@{place}"
        if key_ in tolerated:
            return
        if key_ not in reported:
            _set_add(reported, key_)
            send(("violation", key_, detail[:300]))
        if prevent and enforce:
            raise _RuntimeError(f"the grader refuses this to library code: {detail[:200]}")

    # ------------------------------------------------------------------ the runner as imported

    modules = _runner_modules()
    snapshot = []  # (label, mapping, keys, values)
    hot_names = {"_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.outcomes", "_pytest.main",
                 "_pytest.skipping", "_pytest.nodes", "_pytest.unittest", "pluggy._callers", "pluggy._hooks",
                 "pluggy._manager", "pluggy._result", "pluggy._execution", "pluggy._caller"}
    hot = []
    for module in modules:
        mapping = module.__dict__
        entry = (module.__name__, mapping, _tuple(mapping.keys()), _tuple(mapping.values()))
        snapshot.append(entry)
        is_hot = module.__name__ in hot_names
        if is_hot:
            hot.append(entry)
        for value in _list(mapping.values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
                proxy = _type_dict(value)
                centry = (f"{module.__name__}.{value.__qualname__}", proxy, _tuple(proxy.keys()),
                          _tuple(proxy.values()))
                snapshot.append(centry)
                if is_hot:
                    hot.append(centry)

    def verify(entries):
        for i, (label, mapping, keys, values) in _zip(_iter(_range_len(entries)), entries):
            if (_len(mapping) == _len(keys) and _all(_map(_is, mapping.keys(), keys))
                    and _all(_map(_is, mapping.values(), values))):
                continue
            now = _dict(mapping)
            old = _dict(_zip(keys, values))
            changed = []
            benign = True
            for name in old:
                if name not in now or not _is(now[name], old[name]):
                    _list_append(changed, name)
            for name in now:
                if name not in old:
                    _list_append(changed, name)
                    if _type(now[name]) is not _ModuleType:
                        benign = False
            for name in changed:
                if name in old:
                    benign = False
            if not benign:
                for name in changed[:3]:
                    violation("runner-changed", f"{label}.{name}", f"the test runner was changed: {label}.{name}")
            entries[i] = (label, mapping, _tuple(mapping.keys()), _tuple(mapping.values()))

    _range = range

    def _range_len(seq):
        return _range(_len(seq))

    allowed_hooks = _list(sys.meta_path) + _list(sys.path_hooks)
    _wrapped = (staticmethod, classmethod)

    def origin(obj):
        """Whose code ``obj`` (a function, a class or an instance) runs: the kind of its first Python function."""
        t = _type(obj)
        if t is _FunctionType:
            return kind_of(obj.__code__.co_filename)
        if t is _MethodType:
            return origin(obj.__func__)
        cls = obj if _isinstance(obj, _typetype) else t
        for c in _type_mro(cls):
            for value in _type_dict(c).values():
                if _type(value) in _wrapped:
                    value = value.__func__
                if _type(value) is _FunctionType:
                    return kind_of(value.__code__.co_filename)
        return STDLIB  # code written in C

    def check_import_hooks(meta_path, path_hooks):
        for hooks in (meta_path, path_hooks):
            if _type(hooks) is not _list:
                continue
            for hook in hooks:
                known = False
                for h in allowed_hooks:
                    if _is(h, hook):
                        known = True
                        break
                if known:
                    continue
                _list_append(allowed_hooks, hook)
                if origin(hook) in (LIBRARY, UNKNOWN, TEST):
                    t = hook if _isinstance(hook, _typetype) else _type(hook)
                    name = _type_qualname(t) if _isinstance(t, _typetype) else "?"
                    violation("import-hook", name, f"an import hook of the repository was installed: {name}")

    # ------------------------------------------------------------------ who did it

    def attribute(frame):
        """The first frame that is not the runner's, the standard library's or an installed package's."""
        while frame is not None:
            if _is(frame.f_code, main_code):  # this program's first frame (and the loader below it)
                return None, None
            kind = kind_of(frame.f_code.co_filename)
            if kind != RUNNER and kind != STDLIB and kind != INSTALLED:
                return frame, kind
            frame = frame.f_back
        return None, None

    def frame_rule(event, caller):
        frame = caller
        while frame is not None and (is_leaking(frame.f_code) or kind_of(frame.f_code.co_filename) == RUNNER):
            if _is(frame.f_code, main_code):
                return
            frame = frame.f_back
        if frame is None:
            return
        kind = kind_of(frame.f_code.co_filename)
        if kind == LIBRARY or kind == UNKNOWN:
            place = where(frame)
            violation("frames", place, f"{place} took a stack frame ({event})", prevent=True)

    def blame(event, caller, what, prevent=True):
        frame, kind = attribute(caller)
        if kind == LIBRARY or kind == UNKNOWN:
            place = where(frame)
            violation(event, place, f"{place}: {what}", prevent=prevent)

    # ------------------------------------------------------------------ files

    protected_ids = set()
    protected_names = ("conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml",
                       "tox.ini", "setup.cfg", "sitecustomize.py", "usercustomize.py")
    for path in digests:
        try:
            st = _stat(path)
            _set_add(protected_ids, (st.st_dev, st.st_ino))
        except OSError:
            pass
    verified = set()

    def normalise(path):
        if _type(path) is _bytes:
            try:
                path = path.decode("utf-8", "surrogateescape")
            except _Exception:
                return None
        if _type(path) is not _str:
            return None
        if not _str_startswith(path, "/"):
            path = _getcwd() + "/" + path
        out = []
        for part in _str_split(path, "/"):
            if part == "" or part == ".":
                continue
            if part == "..":
                if out:
                    out.pop()
                continue
            _list_append(out, part)
        return "/" + _str_join("/", out)

    def protected(path):
        """Why ``path`` (normalised) must not be written while the tests run, or None."""
        if _str_startswith(path, "/proc/"):
            return "process memory" if _str_endswith(path, "/mem") else None
        if _str_startswith(path, "/run/agent_gym") or _str_startswith(path, private_prefix):
            return "the sandbox's control files"
        try:
            st = _stat(path)
            if (st.st_dev, st.st_ino) in protected_ids:
                return "a test or configuration file"
        except _OSError:
            pass
        if not _str_startswith(path, repo_prefix):
            return None
        rel = path[_len(repo_prefix):]
        name = _str_rsplit(rel, "/", 1)[-1]
        if name in protected_names or _str_endswith(name, ".pth") or _is_test_rel(rel):
            return "a test or configuration file"
        if "__pycache__" in _str_split(rel, "/") or _str_endswith(name, ".pyc") or _str_endswith(name, ".so"):
            return "compiled code"
        return None

    def on_open(args, caller):
        path, mode, flags = args[0], args[1], args[2]
        writes = False
        if _type(mode) is _str:
            for ch in "wax+":
                if ch in mode:
                    writes = True
        if _type(flags) is _int and flags & _write_flags:
            writes = True
        full = normalise(path)
        if full is None:
            return
        if _str_startswith(full, "/proc/") and _str_endswith(full, "/mem"):
            blame("open", caller, f"opened {full}")
            return
        if writes:
            why = protected(full)
            if why is not None:
                blame("write", caller, f"wrote {why} ({full})")

    def on_paths(event):
        def handler(args, caller):
            for arg in args[:2]:
                full = normalise(arg)
                if full is not None and protected(full) is not None:
                    blame(event, caller, f"{event} on {full}")
                    return
        return handler

    def on_compile(args, caller):
        source, filename = args[0], args[1]
        full = normalise(filename) if filename is not None else None
        if full is None:
            return
        direct = kind_of(caller.f_code.co_filename) if caller is not None else RUNNER
        if full in digests or _str_endswith(full, "/conftest.py") or (
                _str_startswith(full, repo_prefix) and _is_test_rel(full[_len(repo_prefix):])):
            if _type(source) is _bytes or _type(source) is _str:
                data = source if _type(source) is _bytes else _str_encode(source)
                if _dict_get(digests, full) == _sha256(data).hexdigest():
                    _set_add(verified, full)
                    return
                rel = full[_len(repo_prefix):] if _str_startswith(full, repo_prefix) else full
                violation("test-source", rel, f"{rel} was compiled from other text than the hidden tests")
                return
            if direct == RUNNER:  # pytest's assertion rewriting compiles the tree it parsed (checked above)
                return
            rel = full[_len(repo_prefix):] if _str_startswith(full, repo_prefix) else full
            violation("test-source", rel, f"{rel} was compiled from a syntax tree built elsewhere")
            return
        if filename == script or _str_startswith(full, private_prefix):
            place = where(caller) if caller is not None else "?"
            violation("compile", place, f"{place} compiled code under the name of the grader's program",
                      prevent=True)
            return
        if kind_of(full) in (RUNNER, STDLIB, INSTALLED):
            frame = caller
            while frame is not None and kind_of(frame.f_code.co_filename) in (STDLIB, INSTALLED, RUNNER):
                if frame.f_code.co_name in ("source_to_code", "get_code"):
                    return  # the import system compiles the file it read
                frame = frame.f_back
            if frame is not None and kind_of(frame.f_code.co_filename) in (LIBRARY, UNKNOWN):
                place = where(frame)
                violation("compile", place, f"{place} compiled code under the name of {full}", prevent=True)

    def on_setattr(args, caller):
        obj = args[0]
        if _len(args) < 2 or args[1] not in ("__code__", "__defaults__", "__kwdefaults__"):
            return
        if _type(obj) is not _FunctionType:
            return
        kind = kind_of(obj.__code__.co_filename)
        if kind == RUNNER or kind == TEST:
            blame("setattr", caller, f"changed {args[1]} of a function of the {kind}")

    def on_direct(event):
        def handler(args, caller):
            if caller is None:
                return
            kind = kind_of(caller.f_code.co_filename)
            if kind == LIBRARY or kind == UNKNOWN:
                place = where(caller)
                violation(event, place, f"{place}: {event}", prevent=True)
        return handler

    def on_attr(args, caller):
        if _len(args) > 1 and args[1] in ("tb_frame", "gi_frame", "cr_frame", "ag_frame"):
            frame_rule(f"read {args[1]}", caller)

    def on_blame(event, what):
        def handler(args, caller):
            blame(event, caller, what)
        return handler

    def on_import(args, caller):
        if _len(args) >= 5:
            check_import_hooks(args[3], args[4])

    # ------------------------------------------------------------------ the reporter's records

    collected = {"items": {}, "functions": {}}
    observed = {}

    trusted_frames = {}  # frames (still running, or finished) whose callers were all checked

    def trusted_stack(caller, expected, through_car):
        """The frame of ``call_and_report`` (or True) when the stack from ``caller`` is the reporter's, else why not.

        Every frame below the reporter must run the runner's code, down to this program's own first
        frame; ``through_car``: one of them is ``_pytest.runner.call_and_report``. Frames already
        checked (the runner's outer loop stays the same from test to test) end the walk early.
        """
        if caller is None or not _is(caller.f_code, expected):
            return "the record was not raised by the grader's reporter"
        names = caller.f_locals
        for name, value in closures[expected]:
            if not _is(_dict_get(names, name, names), value):
                return "the reporter's code ran with other values than the grader's"
        if _get_ident() != main_tid:
            return "the record was raised from another thread"
        frame = caller.f_back
        car = None
        last = caller
        walked = []
        while frame is not None:
            code = frame.f_code
            if _is(code, car_code):
                car = frame
            if frame in trusted_frames or _is(code, main_code):
                last = None
                break
            if kind_of(code.co_filename) != RUNNER:
                return f"{where(frame)} is on the reporter's stack"
            _list_append(walked, frame)
            last = frame
            frame = frame.f_back
        if last is not None:
            return "the reporter was not reached from the grader's program"
        if through_car and car is None:
            return "the record did not come from pytest's test protocol"
        if _len(trusted_frames) > 512:
            trusted_frames.clear()
        for f in walked:
            trusted_frames[f] = True
        return car if car is not None else True

    def check_hookimpls(session, names):
        hook = session.config.hook
        for name in names:
            caller_ = _getattr(hook, name, None)
            impls = caller_.get_hookimpls() if caller_ is not None else ()
            for impl in impls:
                function = _object_getattribute(impl, "function")
                code = _getattr(function, "__code__", None) if _type(function) in (_FunctionType, _MethodType) else None
                kind = kind_of(code.co_filename) if _type(code) is _CodeType else UNKNOWN
                if kind not in (RUNNER, TEST, INSTALLED, STDLIB):
                    place = code.co_filename if _type(code) is _CodeType else _repr(_type(function))
                    if _str_startswith(place, repo_prefix):
                        place = place[_len(repo_prefix):]
                    violation("plugin", f"{name}:{place}", f"code of {place} implements {name}")

    def test_code_problem(obj, nodeid):
        """Why the object an item runs is not test code compiled from the hidden tests (None when it is)."""
        function = obj.__func__ if _type(obj) is _MethodType else obj
        if _type(function) is not _FunctionType:
            return None  # not Python code of a test (a C callable, a class): nothing a patch wrote
        filename = function.__code__.co_filename
        kind = kind_of(filename)
        if kind == TEST:
            if normalise(filename) not in verified:
                return f"the test function of {nodeid} was not compiled from the hidden test file"
            return None
        if kind == LIBRARY or kind == UNKNOWN:
            return f"the test function of {nodeid} is code of {filename}"
        return None  # a wrapper of the standard library or an installed package (mock.patch, hypothesis)

    def check_item(item, nodeid):
        if not _is(_dict_get(collected["items"], nodeid), item):
            return f"{nodeid} is not the item pytest collected"
        obj = _dict_get(_object_getattribute(item, "__dict__"), "_obj")
        want = _dict_get(collected["functions"], nodeid)
        if obj is None or _is(obj, want):
            return None
        return test_code_problem(obj, nodeid)  # set since collection (unittest's cases are made per test)

    def on_emit(args, caller):
        if _len(args) < 2:
            return
        kind, payload = args[0], args[1]
        if state["ended"]:
            return
        if kind == "test":
            why = trusted_stack(caller, codes["logreport"], True)
            if _type(why) is _str:
                violation("forged-record", "test", why)
                return
            nodeid, when, outcome = payload[0], payload[1], payload[2]
            item = _dict_get(why.f_locals, "item")
            problem = check_item(item, nodeid)
            if problem is not None:
                violation("item", nodeid, problem)
            if when == "call":
                verify(hot)
                if outcome == "passed":
                    seen = _dict_get(observed, nodeid)
                    if seen is None:
                        violation("unobserved", nodeid, f"{nodeid} was reported passed but its test never ran")
                    elif seen != "returned":
                        violation("outcome", nodeid, f"{nodeid} was reported passed but its test {seen}")
                if item is not None:
                    check_hookimpls(_object_getattribute(item, "session"), (
                        "pytest_runtest_logreport", "pytest_runtest_makereport", "pytest_runtest_call",
                        "pytest_pyfunc_call"))
            send(("test",) + _tuple(payload))
        elif kind == "collect_error":
            why = trusted_stack(caller, codes["collectreport"], False)
            if _type(why) is _str:
                violation("forged-record", "collect", why)
                return
            send(("collect_error",) + _tuple(payload))
        elif kind == "collected":
            why = trusted_stack(caller, codes["collection_finish"], False)
            if _type(why) is _str:
                violation("forged-record", "collected", why)
                return
            session = payload[0]
            verify(snapshot)
            items = _object_getattribute(session, "items")
            for item in items:
                d = _object_getattribute(item, "__dict__")
                nodeid = _getattr(item, "nodeid", None)
                collected["items"][nodeid] = item
                obj = _dict_get(d, "_obj")
                collected["functions"][nodeid] = obj
                problem = test_code_problem(obj, nodeid) if obj is not None else None
                if problem is not None:
                    violation("test-source", nodeid, problem)
            check_hookimpls(session, ("pytest_runtest_logreport", "pytest_runtest_makereport", "pytest_runtest_call",
                                      "pytest_pyfunc_call", "pytest_runtest_protocol", "pytest_runtest_setup",
                                      "pytest_runtest_teardown", "pytest_collectreport", "pytest_sessionfinish"))
            send(("collected",) + _tuple(payload[1:]))
        elif kind == "end":
            why = trusted_stack(caller, codes["sessionfinish"], False)
            if _type(why) is _str:
                violation("forged-record", "end", why)
                return
            verify(snapshot)
            state["ended"] = True
            send(("end",) + _tuple(payload))

    def on_observe(args, caller):
        if _len(args) < 2:
            return
        nodeid, exc_type = args[0], args[1]
        why = trusted_stack(caller, codes["call_wrapper"], True)
        if _type(why) is _str:
            violation("forged-record", "observe", why)
            return
        if exc_type is None:
            seen = "returned"
        else:
            mro = _type_mro(exc_type) if _isinstance(exc_type, _typetype) else ()
            if _any(_is(c, Skipped) for c in mro):
                seen = "skipped"
            elif XFailed is not None and _any(_is(c, XFailed) for c in mro):
                seen = "xfailed"
            else:
                seen = f"raised {_type_qualname(exc_type)}" if mro else "raised"
        before = _dict_get(observed, nodeid)
        if before is None or before == "returned":
            observed[nodeid] = seen

    handlers = {
        EMIT: on_emit, OBSERVE: on_observe, "open": on_open, "compile": on_compile, "import": on_import,
        "sys._getframe": lambda args, caller: frame_rule("sys._getframe", caller),
        "sys._current_frames": lambda args, caller: frame_rule("sys._current_frames", caller),
        "object.__getattr__": on_attr, "object.__setattr__": on_setattr, "object.__delattr__": on_setattr,
        "gc.get_objects": on_blame("gc", "gc.get_objects"), "gc.get_referrers": on_blame("gc", "gc.get_referrers"),
        "gc.get_referents": on_blame("gc", "gc.get_referents"), "sys.settrace": on_blame("trace", "sys.settrace"),
        "sys.setprofile": on_blame("trace", "sys.setprofile"),
        "sys.addaudithook": on_blame("audit", "sys.addaudithook"),
        "code.__new__": on_direct("code.__new__"), "marshal.loads": on_direct("marshal.loads"),
        "marshal.load": on_direct("marshal.load"),
    }
    for event in ("os.rename", "os.remove", "os.rmdir", "os.truncate", "os.link", "os.symlink", "os.chmod",
                  "os.chown", "os.utime", "os.mkdir", "shutil.rmtree", "shutil.move", "shutil.copyfile",
                  "shutil.copytree", "os.replace"):
        handlers[event] = on_paths(event)
    for event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.addressof", "ctypes.call_function",
                  "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
                  "ctypes.PyObj_FromPtr", "ctypes.set_errno", "ctypes.get_errno", "ctypes.memmove",
                  "ctypes.memset", "ctypes.set_exception"):
        handlers[event] = on_blame("ctypes", event)
    _handler = handlers.get
    busy = set()

    frame_attrs = ("tb_frame", "gi_frame", "cr_frame", "ag_frame")
    code_attrs = ("__code__", "__defaults__", "__kwdefaults__")

    def hook(event, args):
        handler = _handler(event)
        if handler is None:
            return
        if event == "object.__getattr__":  # most often a read of __code__: only frames matter
            if args[1] not in frame_attrs:
                return
        elif event == "object.__setattr__" or event == "object.__delattr__":
            if args[1] not in code_attrs:
                return
        tid = _get_ident()
        if tid in busy:
            return
        _set_add(busy, tid)
        try:
            caller = _getframe(1)
            try:
                handler(args, caller)
            except _RuntimeError:
                raise
            except _Exception as exc:  # the guard's own failure: recorded, never hidden
                violation("guard-error", event, f"the guard failed on {event}: {_type(exc).__name__}: {exc}")
        finally:
            _set_discard(busy, tid)

    # ------------------------------------------------------------------ the reporter plugin

    hookimpl = pytest.hookimpl

    def message(report):
        longrepr = report.longrepr
        crash = _getattr(longrepr, "reprcrash", None)
        text = _getattr(crash, "message", None)
        if _type(text) is not _str:
            text = longrepr if _type(longrepr) is _str else ""
        text = text.strip()
        return _str_split(text, "\n")[0][:300] if text else ""

    class Reporter:
        """The grader's pytest plugin: each result to the guard, which signs it (see the module docstring)."""

        @hookimpl(tryfirst=True)
        def pytest_runtest_logreport(self, report):
            outcome = report.outcome
            wasxfail = "wasxfail" in _object_getattribute(report, "__dict__")
            text = message(report) if outcome == "failed" else ""
            _audit(_emit, "test", (_str(report.nodeid), _str(report.when), _str(outcome), _bool(wasxfail), text))

        @hookimpl(tryfirst=True)
        def pytest_collectreport(self, report):
            if report.outcome == "failed":
                _audit(_emit, "collect_error", (_str(report.nodeid), message(report)))

        @hookimpl(trylast=True)
        def pytest_collection_finish(self, session):
            ini = _getattr(session.config, "inipath", None)
            _audit(_emit, "collected", (session, _len(session.items), _str(ini) if ini else None,
                                       _str(session.config.rootpath)))

        @hookimpl(trylast=True)
        def pytest_sessionfinish(self, session, exitstatus):
            _audit(_emit, "end", (_int(exitstatus),))

        @hookimpl(hookwrapper=True, trylast=True)
        def pytest_runtest_call(self, item):
            outcome = yield
            excinfo = outcome.excinfo
            _audit(_observe, _str(item.nodeid), excinfo[0] if excinfo else None)

    closures = {}
    for function in (Reporter.pytest_runtest_logreport, Reporter.pytest_collectreport,
                     Reporter.pytest_collection_finish, Reporter.pytest_sessionfinish, Reporter.pytest_runtest_call):
        code = function.__code__
        closures[code] = _tuple(_zip(code.co_freevars, [c.cell_contents for c in function.__closure__ or ()]))
    codes = {"logreport": Reporter.pytest_runtest_logreport.__code__,
             "collectreport": Reporter.pytest_collectreport.__code__,
             "collection_finish": Reporter.pytest_collection_finish.__code__,
             "sessionfinish": Reporter.pytest_sessionfinish.__code__,
             "call_wrapper": Reporter.pytest_runtest_call.__code__}
    sys.addaudithook(hook)
    return Reporter()


def _child(config, key, digests, fds, script, main_code):
    """The test process (never returns)."""
    record_w, out_w, go_r, close = fds
    try:
        os.setsid()
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        for fd in close:
            os.close(fd)
        os.close(out_w)
        import pytest

        os.chdir(config["repo"])
        os.environ.update(config["env"])
        plugin = _guard(config, key, record_w, digests, script, main_code)
        if os.read(go_r, 1) != b"g":  # the parent holds the verdict's key and cannot be read any more
            os._exit(70)
        os.close(go_r)
        sys.path[:0] = [config["repo"]] + [os.path.join(config["repo"], p) for p in config.get("pythonpath") or ()]
        sys.dont_write_bytecode = True
        code = pytest.main(list(config["args"]), plugins=[plugin])
    except BaseException:  # the run failed to start: its output says why
        import traceback

        traceback.print_exc()
        code = 99
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(int(code) if isinstance(code, int) else 1)


def _parent(config, key, digests, pid, fds, started, hmac_digest):
    """Collect the child's records and output, then write the verdict."""
    import json
    import select
    import signal
    import time
    record_r, out_r, go_w = fds
    with open(config["nonce_file"], "rb") as f:
        nonce = f.read()
    os.unlink(config["nonce_file"])
    os.write(go_w, b"g")
    os.close(go_w)
    deadline = started + float(config["timeout"])
    tail = bytearray()
    buffer = bytearray()
    lines = []
    status = None
    timed_out = False
    open_fds = [record_r, out_r]
    ended_at = None
    while open_fds:
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status, ended_at = st, time.monotonic()
        if status is None and time.monotonic() > deadline:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            ended_at = time.monotonic()
        # once the child is gone, what it wrote is read at once; its descendants get no more than a second
        wait = 0.0 if status is not None else 0.05
        ready, _, _ = select.select(open_fds, [], [], wait)
        if status is not None and (not ready or time.monotonic() - ended_at > 1.0):
            break
        for fd in ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                open_fds.remove(fd)
                continue
            if fd == out_r:
                tail += chunk
                if len(tail) > 1 << 16:
                    del tail[:len(tail) - (1 << 16)]
            else:
                buffer += chunk
                while b"\n" in buffer:
                    line, _, rest = bytes(buffer).partition(b"\n")
                    buffer = bytearray(rest)
                    lines.append(line)
                if len(buffer) > 1 << 22:  # a record this long is not the reporter's
                    lines.append(bytes(buffer[:64]))
                    buffer = bytearray()
    if status is None:  # the child closed its pipes as it exited
        _, status = os.waitpid(pid, 0)
    verdict = _tally(lines, key, hmac_digest, _literal)
    verdict["timed_out"] = timed_out
    verdict["exit_code"] = (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)) \
        if status is not None else None
    import hashlib

    now_digests = _digests(list(digests), hashlib.sha256)
    verdict["changed_files"] = sorted(path for path in digests if now_digests.get(path) != digests[path])
    body = json.dumps(verdict, sort_keys=True)
    mac = hmac_digest(nonce, body.encode(), "sha256").hex()
    sys.stdout.write(tail.decode("utf-8", "replace"))
    sys.stdout.flush()
    try:
        fd = os.open(config["verdict"], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"{VERDICT_MARK} {mac}\n{body}\n")
    except OSError as exc:
        print(f"\n[the verdict could not be written: {exc}]")


def _literal(text):
    """The tuple a record's text is: ``repr`` of a tuple of str, int, bool and None (its HMAC was checked)."""
    value = eval(compile(text, "<record>", "eval"), {"__builtins__": {}}, {})  # noqa: S307 - authenticated text
    return value if type(value) is tuple else None


def _tally(lines, key, hmac_digest, literal_eval):
    """The verdict from the record lines: results as the reporter saw them, the guard's findings, the channel's."""
    results, messages, collect_errors, violations, problems = {}, {}, [], [], []
    verdict = {"complete": False, "collected": None, "ini": None, "rootdir": None, "exitstatus": None}
    expected = 0
    for line in lines:
        try:
            seq_text, mac, text = line.decode("utf-8").split(" ", 2)
            seq = int(seq_text)
            good = hmac_digest(key, f"{seq} {text}".encode(), "sha256").hex() == mac and seq == expected
            payload = literal_eval(text) if good else None
        except Exception:
            good, payload = False, None
        if not good or not isinstance(payload, tuple) or not payload:
            problems.append(f"a line on the results channel was not the reporter's: {line[:80]!r}")
            continue
        expected += 1
        kind = payload[0]
        if kind == "test":
            _, nodeid, when, outcome, wasxfail, text = payload
            if when == "call":
                if wasxfail:
                    value = "xfailed" if outcome == "skipped" else "failed"
                else:
                    value = {"passed": "passed", "skipped": "skipped"}.get(outcome, "failed")
                if nodeid in results and when == "call" and results[nodeid] != "error":
                    problems.append(f"{nodeid} was reported twice")
                if results.get(nodeid) != "error":
                    results[nodeid] = value
                if outcome == "failed":
                    messages[nodeid] = text
            elif outcome == "failed":
                results[nodeid] = "error"
                messages[nodeid] = text
            elif outcome == "skipped" and when == "setup":
                results[nodeid] = "xfailed" if wasxfail else "skipped"
        elif kind == "collect_error":
            collect_errors.append(payload[1])
        elif kind == "collected":
            verdict["collected"], verdict["ini"], verdict["rootdir"] = payload[1], payload[2], payload[3]
        elif kind == "violation":
            violations.append([payload[1], payload[2]])
        elif kind == "end":
            verdict["complete"] = True
            verdict["exitstatus"] = payload[1]
            break
    verdict.update(results=results, messages=messages, collect_errors=collect_errors, violations=violations,
                   channel_problems=problems[:20])
    return verdict


def main():
    """Run the tests of ``sys.argv[1]``'s configuration (see the module docstring)."""
    import time

    started = time.monotonic()
    main_code = sys._getframe(1).f_code  # this program's first frame: a stack the reporter trusts ends there
    script = main_code.co_filename
    here = os.path.realpath(os.path.dirname(script)) if os.path.isabs(script) else None
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != here]  # neither this directory nor "."
    import hashlib
    import json

    hmac_digest = _hmac_function()
    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
    import pytest  # noqa: F401 - the runner, before the repository is importable

    _runner_modules()
    digests = _digests(config.get("protected") or (), hashlib.sha256)
    key = os.urandom(32)
    _undumpable()  # inherited by both processes: no other process of the sandbox user reads their memory
    import gc

    gc.freeze()  # what is imported stays out of the collector's way: the child copies none of it on write
    record_r, record_w = os.pipe()
    out_r, out_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(config, key, digests, (record_w, out_w, go_r, (record_r, out_r, go_w)), script, main_code)
    for fd in (record_w, out_w, go_r):
        os.close(fd)
    _parent(config, key, digests, pid, (record_r, out_r, go_w), started, hmac_digest)


if __name__ == "__main__":
    main()
