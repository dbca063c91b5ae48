"""Lab image only: a code cache for Python modules imported from zip files.

Every Ansible module runs on a host as an AnsiballZ payload: a zip of sources that Python's zipimport
compiles again at every run (a zip holds no bytecode that Python would write back). On the lab hosts
that compile was about a fifth of a deploy's CPU (docs/benchmarks.md, "Bytecode"), and CI runs
thousands of module runs. This hook, installed into the lab image's system Python by ``lab/bin/lab``
through a ``.pth`` file, keeps each compiled module under ``/var/cache/specdec-lab-zipimport``, keyed
by the SHA-256 of its source (and the optimization level), in a directory per interpreter (cache tag).

The code is what ``compile()`` made of the same source; only its file name is set to the path of the
zip that asked, so tracebacks name the payload of the run they come from. Nothing of the collection
runs differently: the cache holds Python's own compile output. GPU hosts do not have it.
"""

import os
import sys
import zipimport

CACHE_DIR = "/var/cache/specdec-lab-zipimport"
_compile_source = zipimport._compile_source


def retarget(code, filename):
    """``code`` and every code object nested in it, with ``co_filename`` set to ``filename``."""
    consts = tuple(retarget(const, filename) if isinstance(const, type(code)) else const for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def cache_path(source, cache_dir=None):
    import hashlib  # noqa: PLC0415 - imported at the first zip import, not at every start of python3

    key = hashlib.sha256(b"%d\0" % sys.flags.optimize + source).hexdigest()
    return os.path.join(cache_dir or CACHE_DIR, sys.implementation.cache_tag, key[:2], key)


def cached_compile_source(pathname, source, cache_dir=None):
    """zipimport's compile step, through the cache; any cache error falls back to compiling."""
    import marshal  # noqa: PLC0415 - as hashlib above

    path = cache_path(source, cache_dir)
    try:
        with open(path, "rb") as handle:
            return retarget(marshal.load(handle), pathname)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile_source(pathname, source)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = "%s.%d" % (path, os.getpid())
        with open(tmp, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(tmp, path)
    except OSError:
        pass
    return code


def install():
    zipimport._compile_source = cached_compile_source
