# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Contract: redact-server-args-0.5.17 / -0.5.23 against the real sglang wheels.

Real sglang writes its server args to the journal at every start (``sglang/srt/entrypoints/engine.py``:
0.5.17 ``logger.info(f"{server_args=}")``, the dataclass repr; 0.5.23 a dict that hides only the
watermark secrets), API key included. Each set: base checksum = the wheel's RECORD, applies into a
copy of the real file, compile-mode verify, revert byte-identical, touches no file another set
touches. Then the logging code itself: the module-level helpers and the ``logger.info`` statements of
the real engine.py, pristine and patched, are executed on a CPU with a server-args object carrying
secrets (sglang's ServerArgs needs torch to import, so the object is a stand-in with every real field
name of that release). Pristine, the key is in the log (the leak); patched, it is not, and the line is
the pristine line with each secret replaced by ``<redacted>`` (nothing else changes). A scan of
``sglang/srt`` proves engine.py's two statements are the only log calls that format the server args.
"""

import ast
import base64
import dataclasses
import hashlib
import pathlib
import shutil
import sys
import types

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset as ps
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import unified_diff as ud

REPO = pathlib.Path(__file__).resolve().parents[2]
ENGINE = "sglang/srt/entrypoints/engine.py"
SECRETS = {
    "api_key": "sk-contract-api-key-9f3",
    "admin_api_key": "sk-contract-admin-key-51c",
    "ssl_keyfile_password": "contract-keyfile-password-77",
}
PY = sys.executable


@pytest.fixture(params=["0.5.17", "0.5.23"])
def case(request, sglang_tree):
    version = request.param
    set_dir = REPO / "patchsets" / ("redact-server-args-" + version)
    return version, sglang_tree(version), set_dir, yaml.safe_load((set_dir / "patchset.yml").read_text())


def record_sha(tree, rel):
    """The checksum the wheel's RECORD holds for `rel` (urlsafe base64 sha256)."""
    record = next(tree.glob("sglang-*.dist-info")) / "RECORD"
    for line in record.read_text().splitlines():
        path, digest, _size = line.rsplit(",", 2)
        if path == rel:
            algo, b64 = digest.split("=", 1)
            assert algo == "sha256"
            return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    raise KeyError(rel)


def patched_engine(set_dir, manifest, tree):
    (entry,) = manifest["files"]
    patch = ud.parse((set_dir / entry["diff"]).read_bytes())[0]
    return ud.apply_file_patch(patch, (tree / ENGINE).read_bytes()).decode()


# --- the set as a patch set ------------------------------------------------------------------------


def test_the_set_is_made_for_the_wheels_engine_py_and_nothing_else(case):
    version, tree, set_dir, manifest = case
    assert manifest["sglang_version"] == version and manifest["serves"] == ps.EVERY_REQUEST
    assert [e["path"] for e in manifest["files"]] == [ENGINE]
    assert manifest["files"][0]["base_sha256"] == record_sha(tree, ENGINE)
    ps.validate(str(set_dir), manifest, source_tree=str(tree))
    others = [
        d
        for d in (REPO / "patchsets").glob("*/patchset.yml")
        if d.parent != set_dir and yaml.safe_load(d.read_text())["sglang_version"] == version
    ]
    assert others, "the other sets of this sglang version (ddtree-*)"
    for other in others:
        paths = {e["path"] for e in yaml.safe_load(other.read_text())["files"]}
        assert ENGINE not in paths, f"{other.parent.name} also patches {ENGINE}: the bases would not compose"


def test_the_set_applies_verifies_and_reverts_on_the_real_file(case, tmp_path):
    _version, tree, set_dir, manifest = case
    site = tmp_path / "site-packages"
    (site / ENGINE).parent.mkdir(parents=True)
    shutil.copy2(tree / ENGINE, site / ENGINE)
    dist = next(tree.glob("sglang-*.dist-info"))
    (site / dist.name).mkdir()
    shutil.copy2(dist / "METADATA", site / dist.name / "METADATA")
    backup = tmp_path / "backup"
    applied = ps.apply(str(set_dir), str(site), str(backup), manifest, PY)
    assert applied["changed"] is True
    assert hashlib.sha256((site / ENGINE).read_bytes()).hexdigest() == manifest["files"][0]["result_sha256"]
    verified = ps.verify(str(site), manifest, PY, mode="compile")
    assert verified["errors"] == [], verified["errors"]
    ps.revert(str(site), str(backup), manifest, PY)
    assert (site / ENGINE).read_bytes() == (tree / ENGINE).read_bytes()


# --- the logging code, pristine and patched -------------------------------------------------------


def real_field_names(version, tree):
    """Every field name of that release's ServerArgs, read from its source."""
    if version == "0.5.17":
        module = ast.parse((tree / "sglang/srt/server_args.py").read_text())
        cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
        bodies = [cls.body]
    else:
        bodies = [
            n.body
            for f in sorted((tree / "sglang/srt/arg_groups/fields").glob("*.py"))
            for n in ast.parse(f.read_text()).body
            if isinstance(n, ast.ClassDef)
        ]
    names = [
        s.target.id for body in bodies for s in body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    ]
    assert set(SECRETS) <= set(names) and len(names) > 100
    return list(dict.fromkeys(names))


def server_args_like(version, tree, secrets):
    """A ServerArgs stand-in: 0.5.17 a dataclass with the real fields; 0.5.23 an object with resolved_dict()."""
    names = real_field_names(version, tree)
    values = {n: None for n in names} | {"model_path": "/models/target", "port": 30000} | secrets
    if version == "0.5.17":
        cls = dataclasses.make_dataclass("ServerArgs", [(n, object, dataclasses.field(default=None)) for n in names])
        return cls(**values)
    values["watermark_key"] = "watermark-secret"  # what 0.5.23 already redacts

    class ServerArgs:
        def resolved_dict(self):
            return dict(values)

    return ServerArgs()


def watermark_redactor(tree):
    """0.5.23's own redact_watermark_secrets (its dict path), with msgspec and its config classes stood in."""
    source = (tree / "sglang/srt/sampling/watermarking/core.py").read_text()
    module = ast.parse(source)
    keep = [
        n
        for n in module.body
        if (isinstance(n, ast.FunctionDef) and n.name == "redact_watermark_secrets")
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "").startswith("WATERMARK_") for t in n.targets))
    ]
    msgspec = types.SimpleNamespace(Struct=type("Struct", (), {}), structs=types.SimpleNamespace())
    namespace = {
        "copy": __import__("copy"),
        "dataclasses": dataclasses,
        "msgspec": msgspec,
        "Any": object,
        "WatermarkRequestConfig": type("WatermarkRequestConfig", (), {}),
        "WatermarkServerConfig": type("WatermarkServerConfig", (), {}),
    }
    exec(compile(ast.Module(body=keep, type_ignores=[]), "core.py", "exec"), namespace)
    return namespace["redact_watermark_secrets"]


def logged_server_args(source, server_args, tree):
    """Run engine.py's module-level logging helpers and its logger.info(...server_args...) statements."""
    module = ast.parse(source)
    helpers = [
        n
        for n in module.body
        if (isinstance(n, ast.FunctionDef) and n.name == "_server_args_for_logging")
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "_SECRET_SERVER_ARGS" for t in n.targets))
    ]
    statements = [
        n
        for n in ast.walk(module)
        if isinstance(n, ast.Expr)
        and isinstance(n.value, ast.Call)
        and ast.unparse(n.value.func) == "logger.info"
        and _formats_server_args(n.value)
    ]
    assert len(statements) == 2, [ast.unparse(s) for s in statements]
    messages = []
    namespace = {
        "dataclasses": dataclasses,
        "logger": types.SimpleNamespace(info=messages.append),
        "server_args": server_args,
        "ServerArgs": type(server_args),
        "Dict": dict,
        "Any": object,
    }
    if "redact_watermark_secrets" in source:
        namespace["redact_watermark_secrets"] = watermark_redactor(tree)
    body = helpers + statements
    exec(compile(ast.Module(body=body, type_ignores=[]), "engine.py", "exec"), namespace)
    return messages


def test_pristine_sglang_logs_the_keys_and_the_patched_logs_them_redacted(case):
    version, tree, set_dir, manifest = case
    pristine = (tree / ENGINE).read_text()
    patched = patched_engine(set_dir, manifest, tree)
    server_args = server_args_like(version, tree, SECRETS)

    leaked = logged_server_args(pristine, server_args, tree)
    assert len(leaked) == 2
    for message in leaked:  # the leak: what real sglang writes to the journal
        assert message.startswith("server_args=")
        for value in SECRETS.values():
            assert value in message
        if version == "0.5.23":
            assert "watermark-secret" not in message  # 0.5.23 already hid this one, and only such ones

    redacted = logged_server_args(patched, server_args, tree)
    assert len(redacted) == 2
    for before, after in zip(leaked, redacted):
        for value in SECRETS.values():
            assert value not in after
        for name in SECRETS:
            assert f"'{name}': '<redacted>'" in after if version == "0.5.23" else f"{name}='<redacted>'" in after
        expected = before
        for value in SECRETS.values():
            expected = expected.replace(repr(value), repr("<redacted>"))
        assert after == expected  # nothing else in the line changes


def test_unset_secrets_are_logged_as_before(case):
    version, tree, set_dir, manifest = case
    server_args = server_args_like(version, tree, {n: None for n in SECRETS})
    pristine = logged_server_args((tree / ENGINE).read_text(), server_args, tree)
    assert pristine == logged_server_args(patched_engine(set_dir, manifest, tree), server_args, tree)
    for name in SECRETS:
        assert (f"'{name}': None" if version == "0.5.23" else f"{name}=None") in pristine[0]


def _is_server_args(expr):
    return (isinstance(expr, ast.Name) and expr.id == "server_args") or (
        isinstance(expr, ast.Attribute) and expr.attr == "server_args"
    )


def _formats_server_args(call):
    """Whether a log call formats the server-args object itself (not one of its attributes): as an argument,
    in an f-string, or through a helper called on it in an f-string."""
    if any(_is_server_args(a) for a in call.args):
        return True
    for node in ast.walk(call):
        if isinstance(node, ast.FormattedValue):
            value = node.value
            if _is_server_args(value) or (isinstance(value, ast.Call) and any(_is_server_args(a) for a in value.args)):
                return True
    return False


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_engine_py_holds_the_only_log_calls_that_format_the_server_args(version, sglang_tree):
    tree = sglang_tree(version)
    found = []
    for path in sorted((tree / "sglang" / "srt").rglob("*.py")):
        text = path.read_text(errors="replace")
        if "server_args" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            func = ast.unparse(node.func)
            if (func.startswith(("logger.", "logging.")) or func == "print") and _formats_server_args(node):
                found.append(f"{path.relative_to(tree)}:{node.lineno}")
    assert [f.split(":")[0] for f in found] == [ENGINE, ENGINE], found


def test_the_engine_simulator_reads_the_redaction_from_the_real_engine_py(case):
    """The lab's simulator logs the key in clear beside the pristine file and redacts what the patched one does."""
    from sglang_engine_simulator import server_args_log  # noqa: PLC0415

    _version, tree, set_dir, manifest = case
    assert server_args_log.redacted_fields((tree / ENGINE).read_text()) == ()
    assert server_args_log.redacted_fields(patched_engine(set_dir, manifest, tree)) == tuple(SECRETS)
