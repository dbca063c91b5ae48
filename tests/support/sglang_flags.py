"""The command-line flags real sglang accepts, read statically from its source tree.

Use it to prove that every flag something renders or accepts is a flag sglang has:

    from support.sglang_flags import unknown_flags   # tests/ is on sys.path under pytest

    def test_unit_template_renders_only_real_sglang_flags(sglang_source_tree):
        rendered = ["--model-path", "--port", "--speculative-algorithm", ...]
        assert unknown_flags(rendered, sglang_source_tree) == []

(`tests.support...` does not import: tests/ has no __init__.py, pytest puts tests/ itself on sys.path.)
`sglang_source_tree` is the session fixture in tests/conftest.py (the real sglang wheel unpacked
by scripts/fetch-sglang). Nothing here imports sglang: its `server_args.py` and the field
declarations in `sglang/srt/arg_groups/fields/*.py` are parsed with `ast`.

How sglang 0.5.23 builds its parser (and so what this module reads):
- `ServerArgs.add_cli_args` calls `add_cli_args_from_dataclass` over the namespace classes listed
  in `_INPUT_NAMESPACES`; every field annotated `A[T, "help"]` or `A[T, Arg(...)]` becomes
  `--field-name` (or `Arg(cli_name=...)`) plus `Arg(aliases=[...])`, unless `Arg(no_cli=True)`.
- a few flags are registered by hand with `parser.add_argument("--flag", ...)`.
- `sglang serve` also strips `--model-type` before parsing (`entrypoint="serve"` adds it).

A layout this module does not recognise raises `SglangFlagsError` instead of returning a short
set, so a new sglang version cannot make the check pass vacuously.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from collections.abc import Iterable

SERVE_ONLY_FLAGS = frozenset({"--model-type"})
# Flags every sglang of this family has; their absence means the parse went wrong.
_SANITY_FLAGS = ("--model-path", "--port", "--host", "--speculative-algorithm", "--mem-fraction-static")
_MIN_FLAGS = 200


class SglangFlagsError(RuntimeError):
    """The sglang source tree does not look like the one this parser understands."""


def _flag_name(flag: str) -> str:
    """`--port=30000` -> `--port`; `--port` -> `--port`."""
    return flag.split("=", 1)[0]


def _str_list(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [elt.value for elt in node.elts if isinstance(elt, ast.Constant) and isinstance(elt.value, str)]
    return []


def _is_help_text(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_help_text(node.left) or _is_help_text(node.right)
    return False


def _annotation_flags(field: str, annotation: ast.AST) -> list[str]:
    """Flags one `name: A[T, meta...]` declaration registers ([] when it has no CLI)."""
    if not isinstance(annotation, ast.Subscript):
        return []
    head = annotation.value
    head_name = head.id if isinstance(head, ast.Name) else head.attr if isinstance(head, ast.Attribute) else ""
    if head_name not in ("A", "Annotated"):
        return []
    elts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
    for meta in elts[1:]:
        if isinstance(meta, ast.Call) and getattr(meta.func, "id", getattr(meta.func, "attr", "")) == "Arg":
            kw = {k.arg: k.value for k in meta.keywords if k.arg}
            no_cli = kw.get("no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                return []
            cli_name = kw.get("cli_name")
            name = cli_name.value if isinstance(cli_name, ast.Constant) else "--" + field.replace("_", "-")
            return [name, *_str_list(kw.get("aliases", ast.List(elts=[])))]
        if _is_help_text(meta):
            return ["--" + field.replace("_", "-")]
    return []


def _class_flags(module: ast.Module, class_name: str, seen: frozenset = frozenset()) -> set[str]:
    classes = {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}
    if class_name not in classes:
        raise SglangFlagsError(f"class {class_name} not found where server_args.py imports it from")
    cls = classes[class_name]
    flags: set[str] = set()
    for base in cls.bases:  # namespace classes may share fields through a local base class
        if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
            flags |= _class_flags(module, base.id, seen | {class_name})
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            flags.update(_annotation_flags(stmt.target.id, stmt.annotation))
    return flags


def _scan_server_args(module: ast.Module) -> tuple[dict, list, set]:
    """From server_args.py: imported names (name -> module), the _INPUT_NAMESPACES list, add_argument flags."""
    imported: dict[str, str] = {}  # class name -> module dotted path
    namespaces: list[str] = []
    flags: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in node.targets
        ):
            namespaces = [elt.id for elt in getattr(node.value, "elts", []) if isinstance(elt, ast.Name)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            flags.update(
                arg.value
                for arg in node.args
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-")
            )
    return imported, namespaces, flags


@functools.lru_cache(maxsize=8)
def _cached_flags(tree: str) -> frozenset:
    root = pathlib.Path(tree)
    server_args = root / "sglang" / "srt" / "server_args.py"
    if not server_args.is_file():
        raise SglangFlagsError(f"expected sglang source at {server_args}; run scripts/fetch-sglang")
    imported, namespaces, flags = _scan_server_args(ast.parse(server_args.read_text(encoding="utf-8")))
    if not namespaces:
        raise SglangFlagsError(f"no _INPUT_NAMESPACES list in {server_args}: sglang changed how it builds its CLI")

    parsed: dict[str, ast.Module] = {}
    for name in namespaces:
        dotted = imported.get(name)
        if dotted is None:
            raise SglangFlagsError(f"namespace {name} is not imported in {server_args}")
        path = root.joinpath(*dotted.split(".")).with_suffix(".py")
        if dotted not in parsed:
            parsed[dotted] = ast.parse(path.read_text(encoding="utf-8"))
        flags |= _class_flags(parsed[dotted], name)

    missing = [flag for flag in _SANITY_FLAGS if flag not in flags]
    if missing or len(flags) < _MIN_FLAGS:
        raise SglangFlagsError(
            f"read {len(flags)} flags from {root}, expected at least {_MIN_FLAGS} including {_SANITY_FLAGS}; "
            f"missing {missing}: the parser in tests/support/sglang_flags.py needs updating for this sglang"
        )
    return frozenset(flags)


def sglang_cli_flags(source_tree: pathlib.Path | str, entrypoint: str = "launch_server") -> frozenset:
    """Every flag `python -m sglang.launch_server` (or `sglang serve`) accepts, e.g. `--model-path`."""
    if entrypoint not in ("launch_server", "serve"):
        raise ValueError(f"entrypoint must be 'launch_server' or 'serve', got {entrypoint!r}")
    flags = _cached_flags(str(pathlib.Path(source_tree).resolve()))
    return flags | SERVE_ONLY_FLAGS if entrypoint == "serve" else flags


def unknown_flags(
    flags: Iterable[str], source_tree: pathlib.Path | str, entrypoint: str = "launch_server"
) -> list[str]:
    """The flags (in the order given, `--x=v` allowed) that real sglang does not accept; [] when all are real."""
    known = sglang_cli_flags(source_tree, entrypoint)
    return [flag for flag in flags if _flag_name(flag) not in known]
