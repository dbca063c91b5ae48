"""The lab image's code cache (lab/image/specdec_lab_code_cache.py).

It must hand zipimport and the source loaders (imports, py_compile: a release venv's byte-compile)
exactly what compile() makes of the source, with the file name that asked, and compile again whenever
the source or the optimization level differs or the cache is unusable.
"""

import _frozen_importlib_external
import importlib.util
import marshal
import pathlib
import py_compile
import zipfile
import zipimport

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SOURCE = b"""import os


def outer():
    def inner():
        return os.sep

    return inner


class Kept:
    def method(self):
        raise ValueError("from the payload")
"""


@pytest.fixture
def cache_module(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "specdec_lab_code_cache", REPO / "lab" / "image" / "specdec_lab_code_cache.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(zipimport, "_compile_source", module.cached_compile_source)  # what install() does
    return module


@pytest.fixture
def source_loader_cache(cache_module, monkeypatch):
    """The source loaders' compile step through the cache too (install()'s second half), for one test."""
    monkeypatch.setattr(_frozen_importlib_external.SourceLoader, "source_to_code", cache_module.cached_source_to_code)
    return cache_module


def payload(tmp_path, name, source=SOURCE):
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg_mod.py", source)
    return path


def filenames(code):
    names = {code.co_filename}
    for const in code.co_consts:
        if isinstance(const, type(code)):
            names |= filenames(const)
    return names


def test_a_second_payload_gets_the_cached_code_under_its_own_file_name(tmp_path, cache_module):
    first_zip, second_zip = payload(tmp_path, "run1_payload.zip"), payload(tmp_path, "run2_payload.zip")
    first = zipimport.zipimporter(str(first_zip)).get_code("pkg_mod")
    cached = list((tmp_path / "cache").rglob("*"))
    assert [p for p in cached if p.is_file()] != []
    second = zipimport.zipimporter(str(second_zip)).get_code("pkg_mod")
    fresh = compile(SOURCE, str(second_zip / "pkg_mod.py"), "exec", dont_inherit=True)
    assert second == fresh  # the same code as a compile of this source
    assert filenames(second) == {str(second_zip / "pkg_mod.py")}  # nested functions and classes too
    assert filenames(first) == {str(first_zip / "pkg_mod.py")}
    namespace = {}
    exec(second, namespace)  # the payload's module, run as zipimport's loader would
    assert namespace["outer"]()() == "/"
    with pytest.raises(ValueError) as raised:
        namespace["Kept"]().method()
    assert str(raised.traceback[-1].path) == str(second_zip / "pkg_mod.py")


def test_changed_source_is_compiled_again(tmp_path, cache_module):
    zipimport.zipimporter(str(payload(tmp_path, "a.zip"))).get_code("pkg_mod")
    changed = SOURCE.replace(b"os.sep", b"os.linesep")
    code = zipimport.zipimporter(str(payload(tmp_path, "b.zip", changed))).get_code("pkg_mod")
    namespace = {}
    exec(code, namespace)
    assert namespace["outer"]()() == "\n"
    assert len([p for p in (tmp_path / "cache").rglob("*") if p.is_file()]) == 2


def test_an_unusable_cache_entry_or_directory_falls_back_to_compiling(tmp_path, cache_module):
    zip_path = payload(tmp_path, "a.zip")
    entry = pathlib.Path(cache_module.cache_path(SOURCE, cache_dir=str(tmp_path / "cache")))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"not marshal data")
    code = zipimport.zipimporter(str(zip_path)).get_code("pkg_mod")
    assert code == compile(SOURCE, str(zip_path / "pkg_mod.py"), "exec", dont_inherit=True)
    # a cache directory that cannot be written: still compiled
    (tmp_path / "blocked").write_text("a file where the cache directory should be")
    assert cache_module.cached_compile_source("x.zip/pkg_mod.py", SOURCE, str(tmp_path / "blocked")) == compile(
        SOURCE, "x.zip/pkg_mod.py", "exec", dont_inherit=True
    )


def compiled(tmp_path, name, source=SOURCE, optimize=-1):
    """py_compile's .pyc for a file of ``source`` (what uv's byte-compile of a release venv runs): its code."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(source)
    pyc = py_compile.compile(str(path), cfile=str(path) + "c", doraise=True, optimize=optimize)
    return path, marshal.loads(pathlib.Path(pyc).read_bytes()[16:])


def entries(tmp_path):
    return [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_a_second_venvs_byte_compile_gets_the_cached_code_under_its_own_path(tmp_path, source_loader_cache):
    first_path, first = compiled(tmp_path, "release1/mod.py")
    assert len(entries(tmp_path)) == 1
    second_path, second = compiled(tmp_path, "release2/mod.py")
    assert len(entries(tmp_path)) == 1  # served from the cache
    assert second == compile(SOURCE, str(second_path), "exec", dont_inherit=True)
    assert filenames(second) == {str(second_path)}
    assert filenames(first) == {str(first_path)}


def test_the_optimization_level_is_part_of_the_key(tmp_path, source_loader_cache):
    source = b'"""A docstring that -OO drops."""\n\nassert True\n'
    _, plain = compiled(tmp_path, "a/mod.py", source)
    _, stripped = compiled(tmp_path, "b/mod.py", source, optimize=2)
    assert plain.co_consts[0] == "A docstring that -OO drops."
    assert stripped == compile(source, str(tmp_path / "b/mod.py"), "exec", dont_inherit=True, optimize=2)
    assert len(entries(tmp_path)) == 2


def test_a_compile_while_the_cache_works_compiles_without_it(tmp_path, cache_module):
    """The cache imports hashlib and marshal; an import that compiles from inside it must not recurse."""
    inner = b"x = 1\n"

    def outer_compile():
        code = cache_module.cached("inner.py", inner, None, lambda: compile(inner, "inner.py", "exec"))
        assert code.co_filename == "inner.py"
        return compile(SOURCE, "outer.py", "exec", dont_inherit=True)

    cache_module.cached("outer.py", SOURCE, None, outer_compile, str(tmp_path / "cache"))
    assert [p.name for p in entries(tmp_path)] == [pathlib.Path(cache_module.cache_path(SOURCE)).name]
