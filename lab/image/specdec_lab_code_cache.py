"""Lab image only: a code cache for what Python compiles from source, shared by every lab host.

Two compiles repeat on the lab hosts and cost CI most of its CPU:

- every Ansible module runs as an AnsiballZ payload, a zip of sources that zipimport compiles again at
  every run (a zip holds no bytecode that Python would write back);
- every release build byte-compiles its venv (``UV_COMPILE_BYTECODE=1``: uv's compile step runs
  ``py_compile`` over about 3000 files of the real sglang wheel), and CI builds dozens of releases of
  the same files on fresh containers.

This hook, installed into the lab image's Python by ``lab/bin/lab`` (and run from Debian's
``sitecustomize``, so release venvs have it too), keeps each compiled module under ``CACHE_DIR``, keyed
by the SHA-256 of its source and the optimization level, in a directory per interpreter (cache tag).
``lab/bin/lab`` and molecule's create step mount one host directory there for every lab container.

The code is what ``compile()`` made of the same source; only its file name is set to the path that
asked (the zip of the running payload, the ``.py`` file being compiled), so tracebacks and ``.pyc``
files are what an uncached compile gives. Nothing of the collection runs differently; GPU hosts do not
have it.
"""

import _frozen_importlib_external
import os
import sys
import zipimport

CACHE_DIR = "/var/cache/specdec-lab-code"
_compile_source = zipimport._compile_source
_source_to_code = _frozen_importlib_external.SourceLoader.source_to_code
_busy = []  # set while the cache works: an import it makes compiles without it


def retarget(code, filename):
    """``code`` and every code object nested in it, with ``co_filename`` set to ``filename``."""
    consts = tuple(retarget(const, filename) if isinstance(const, type(code)) else const for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def cache_path(source, optimize=None, cache_dir=None):
    import hashlib  # noqa: PLC0415 - imported at the first compile, not at every start of python3

    level = sys.flags.optimize if optimize is None else optimize
    key = hashlib.sha256(b"%d\0" % level + source).hexdigest()
    return os.path.join(cache_dir or CACHE_DIR, sys.implementation.cache_tag, key[:2], key)


def cached(pathname, source, optimize, compile_it, cache_dir=None):
    """``compile_it()``'s code for ``source``, from the cache when it holds it; any cache error compiles."""
    if _busy:
        return compile_it()
    _busy.append(True)
    try:
        import marshal  # noqa: PLC0415 - as hashlib above

        path = cache_path(source, optimize, cache_dir)
        try:
            with open(path, "rb") as handle:
                return retarget(marshal.load(handle), pathname)
        except (OSError, EOFError, ValueError, TypeError):
            pass
        code = compile_it()
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            # hosts share the directory and their pids overlap: a random part keeps the names apart
            tmp = "%s.%d.%s" % (path, os.getpid(), os.urandom(4).hex())
            with open(tmp, "wb") as handle:
                marshal.dump(code, handle)
            os.replace(tmp, path)
        except OSError:
            pass
        return code
    finally:
        _busy.pop()


def cached_compile_source(pathname, source, cache_dir=None):
    """zipimport's compile step, through the cache."""
    return cached(pathname, source, None, lambda: _compile_source(pathname, source), cache_dir)


def cached_source_to_code(self, data, path, *, _optimize=-1):
    """The source loaders' compile step (imports without bytecode, ``py_compile``), through the cache."""
    if not isinstance(data, (bytes, bytearray)) or not isinstance(path, str):
        return _source_to_code(self, data, path, _optimize=_optimize)
    level = None if _optimize == -1 else _optimize
    return cached(path, bytes(data), level, lambda: _source_to_code(self, data, path, _optimize=_optimize))


def install():
    zipimport._compile_source = cached_compile_source
    _frozen_importlib_external.SourceLoader.source_to_code = cached_source_to_code
