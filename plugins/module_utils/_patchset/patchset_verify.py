# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The patch set verify step: runs inside the release venv's python, standard library only.

``python -c <this file's source> CONFIG_JSON`` (see patchset.verify) compiles the touched files,
then either imports the modules and resolves the defines (import mode) or finds the defines in the
modules' syntax trees (compile mode), and prints one JSON report as its last line. Nothing here
imports Ansible: the venv does not have it.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys


def compile_files(paths: list, errors: list) -> list:
    compiled = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                compile(handle.read(), path, "exec", dont_inherit=True)
            compiled.append(path)
        except SyntaxError as exc:
            errors.append("%s: %s: %s (line %s)" % (path, type(exc).__name__, exc.msg, exc.lineno))
    return compiled


def module_file(site_packages: str, name: str):
    """The file that defines module `name` under `site_packages` (module.py or package/__init__.py)."""
    base = os.path.join(site_packages, *name.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _names(node) -> list:
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [target.id for target in node.targets if isinstance(target, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def ast_has(tree, parts: list) -> bool:
    """True when the dotted `parts` (Class.attr, function, NAME) are defined at the top of `tree`."""
    body = tree.body
    for part in parts:
        found = None
        for node in body:
            if part in _names(node):
                found = node
        if found is None:
            return False
        body = getattr(found, "body", [])
    return True


def verify_by_import(cfg: dict, res: dict) -> None:
    if cfg["site_packages"] not in sys.path:
        sys.path.insert(0, cfg["site_packages"])
    for name in cfg["imports"]:
        try:
            importlib.import_module(name)
            res["imported"].append(name)
        except BaseException as exc:
            res["errors"].append("import %s: %s: %s" % (name, type(exc).__name__, exc))
    for define in cfg["defines"]:
        mod, attrs = define.split(":", 1)
        try:
            obj = importlib.import_module(mod)
            for attr in attrs.split("."):
                obj = getattr(obj, attr)
            res["defines"].append(define)
        except BaseException as exc:
            res["errors"].append("%s: %s: %s" % (define, type(exc).__name__, exc))


def verify_by_syntax_tree(cfg: dict, res: dict) -> None:
    for define in cfg["defines"]:
        mod, attrs = define.split(":", 1)
        path = module_file(cfg["site_packages"], mod)
        if path is None:
            res["errors"].append("%s: module %s not found under %s" % (define, mod, cfg["site_packages"]))
            continue
        try:
            with open(path, "rb") as handle:
                tree = ast.parse(handle.read(), path)
        except SyntaxError as exc:
            res["errors"].append("%s: %s does not parse: %s" % (define, path, exc.msg))
            continue
        if ast_has(tree, attrs.split(".")):
            res["defines"].append(define)
        else:
            res["errors"].append("%s: not defined in %s" % (define, path))


def run(cfg: dict) -> dict:
    """The verify report for one config: mode, compiled, imported, defines, errors."""
    res = {"mode": cfg["mode"], "compiled": [], "imported": [], "defines": [], "errors": []}
    res["compiled"] = compile_files(cfg["compile"], res["errors"])
    if cfg["mode"] == "import":
        verify_by_import(cfg, res)
    else:
        verify_by_syntax_tree(cfg, res)
    return res


def main(argv: list) -> None:
    """Run the config in argv[0]; the report is the last line of stdout (the process exits 0)."""
    sys.stdout.write(json.dumps(run(json.loads(argv[0]))) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
