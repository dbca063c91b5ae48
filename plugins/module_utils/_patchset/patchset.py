# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch sets for an installed sglang: validate, apply, revert, verify.

A patch set is a directory:

    patchset.yml          manifest (YAML; JSON is accepted too)
    files/<path>          whole-file overlays (the full result content)
    diffs/<name>.patch    unified diffs (one file each)

Manifest:

    name: ddtree-spec-info
    description: ...
    sglang_version: 0.5.23
    files:
      - path: sglang/srt/speculative/spec_info.py      # relative to site-packages
        base_sha256: <64 hex> | null                    # null: the patch set creates the file
        result_sha256: <64 hex>
        overlay: files/sglang/srt/speculative/spec_info.py   # or
        diff: diffs/spec_info.patch
    verify:
      imports: [sglang.srt.speculative.spec_info]       # imported in a GPU venv (verify_mode import)
      defines: ["sglang.srt.speculative.spec_info:SpeculativeAlgorithm.DDTREE"]
      compile: true                                     # every touched .py must compile

Every file is checked before anything is written: a file that is neither at its base nor at its
result checksum refuses the whole set, naming the file and both checksums. Originals are backed
up under `backup_dir/files/<path>` with `backup_dir/state.json`; revert restores them byte for byte
(checked against the recorded base checksum) and removes files the set created. Touched modules
have their `__pycache__` entries purged and are byte-compiled again with the venv's python.

Plain Python (stdlib only, >= 3.9); commands run through an injected `runner(argv) -> (rc, out, err)`.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import stat
import subprocess

from ansible_collections.specdec.sglang.plugins.module_utils._host.files import write_atomically
from ansible_collections.specdec.sglang.plugins.module_utils._host.host_program import source_of
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset_verify
from ansible_collections.specdec.sglang.plugins.module_utils._patchset.unified_diff import DiffError
from ansible_collections.specdec.sglang.plugins.module_utils._patchset.unified_diff import apply as apply_diff
from ansible_collections.specdec.sglang.plugins.module_utils._patchset.unified_diff import parse as parse_diff

MANIFEST = "patchset.yml"
STATE_FILE = "state.json"
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
DEFINE_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
MANIFEST_KEYS = {"name", "description", "sglang_version", "serves", "files", "verify"}
FILE_KEYS = {"path", "base_sha256", "result_sha256", "overlay", "diff"}
VERIFY_KEYS = {"imports", "defines", "compile"}
VERIFY_MODES = ("auto", "import", "compile")
# `serves: every_request`: the deploy plan takes the set for every request of its sglang version.
EVERY_REQUEST = "every_request"


class PatchsetError(Exception):
    """A refusal. `data` carries what an operator or AWX can act on (file, expected, found)."""

    def __init__(self, msg, **data):
        super().__init__(msg)
        self.msg = msg
        self.data = data


def refusal(label, msg):
    """A failure's message, naming the set with ``label`` when given (the role passes
    ``sglang_patches_sets[<index>]=<directory> (<name>)``)."""
    return "%s: %s" % (label, msg) if label else msg


def report_entries(applied, verified):
    """The deploy report's patch set entries from the role's registered loop results, in order: the apply or
    revert step's (``applied``) and the verify step's (``verified``; skipped items in check mode carry no
    ``verify``). One entry per set: name, sglang_version, files and changed of the first, verify of the second."""
    return [
        {
            "name": change.get("name"),
            "sglang_version": change.get("sglang_version"),
            "files": change.get("files"),
            "changed": change.get("changed"),
            "verify": check["verify"] if "verify" in check else {},
        }
        for change, check in zip(applied or (), verified or ())
    ]


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def read_bytes(path):
    """File content, or None when the file does not exist."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def sha256_file(path):
    data = read_bytes(path)
    return None if data is None else sha256_bytes(data)


def subprocess_runner(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


# --------------------------------------------------------------------------- manifest


def load_manifest(src):
    """Read `src/patchset.yml` (JSON, or YAML through PyYAML when it is importable)."""
    path = os.path.join(src, MANIFEST)
    data = read_bytes(path)
    if data is None:
        raise PatchsetError("patch set manifest %s not found: src must be a patch set directory" % path, file=path)
    text = data.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        import yaml  # noqa: PLC0415 - optional: targets may lack PyYAML and get the manifest as a parameter
    except ImportError as exc:
        raise PatchsetError(
            "%s is YAML but PyYAML is not importable here; pass the manifest as a parameter "
            "(the role reads it on the controller)" % path,
            file=path,
        ) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PatchsetError("%s is not valid YAML: %s" % (path, exc), file=path) from exc


def _safe_relpath(value):
    if not isinstance(value, str) or not value:
        return False
    if value.startswith("/") or "\\" in value:
        return False
    parts = value.split("/")
    return all(part not in ("", ".", "..") for part in parts)


def manifest_errors(manifest):
    """Schema problems of a manifest, as a list of messages (empty when it is well formed)."""
    if not isinstance(manifest, dict):
        return ["manifest must be a mapping, found %s" % type(manifest).__name__]
    errors = _top_level_errors(manifest)
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        errors.append("files must be a non-empty list, found %r" % (files,))
        files = []
    seen = set()
    for index, entry in enumerate(files):
        errors.extend(_file_entry_errors(index, entry, seen))
    errors.extend(_verify_errors(manifest.get("verify", {})))
    return errors


def _top_level_errors(manifest):
    """Problems of the manifest's keys, name, sglang_version and description."""
    errors = []
    unknown = sorted(set(manifest) - MANIFEST_KEYS)
    if unknown:
        errors.append("manifest has unknown keys %s; allowed: %s" % (unknown, sorted(MANIFEST_KEYS)))
    name = manifest.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        errors.append("name must match %s, found %r" % (NAME_RE.pattern, name))
    if not isinstance(manifest.get("sglang_version"), str) or not manifest.get("sglang_version"):
        errors.append(
            "sglang_version must be the sglang version the set targets (e.g. '0.5.23'), found %r"
            % manifest.get("sglang_version")
        )
    if "description" in manifest and not isinstance(manifest["description"], str):
        errors.append("description must be a string")
    errors.extend(_serves_errors(manifest.get("serves", {})))
    return errors


def _serves_errors(serves):
    """``serves``: dimension -> list of values (an empty list serves none; a missing dimension any), or
    ``every_request`` (the deploy plan takes the set for every request of its sglang version)."""
    if serves == EVERY_REQUEST:
        return []
    if not isinstance(serves, dict):
        return [
            "serves must be every_request or a mapping of dimension -> list of values (e.g. algorithms: [DDTREE]),"
            " found %r" % (serves,)
        ]
    errors = []
    for dimension, values in serves.items():
        if not isinstance(dimension, str) or not re.match(r"^[a-z][a-z0-9_]*$", dimension):
            errors.append("serves: dimension %r must be a name of [a-z0-9_] (e.g. attention_backends)" % (dimension,))
        elif not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            errors.append("serves.%s must be a list of non-empty strings, found %r" % (dimension, values))
    return errors


def _file_entry_errors(index, entry, seen):
    """Problems of files[index]; adds its path to `seen`, the paths of the entries before it."""
    where = "files[%d]" % index
    if not isinstance(entry, dict):
        return ["%s must be a mapping" % where]
    errors = []
    unknown = sorted(set(entry) - FILE_KEYS)
    if unknown:
        errors.append("%s has unknown keys %s; allowed: %s" % (where, unknown, sorted(FILE_KEYS)))
    path = entry.get("path")
    if not _safe_relpath(path):
        errors.append("%s.path must be a relative path inside site-packages without '..', found %r" % (where, path))
    elif path in seen:
        errors.append("%s.path %s is listed twice" % (where, path))
    else:
        seen.add(path)
        where = "files[%d] (%s)" % (index, path)
    return errors + _checksum_errors(where, entry) + _source_errors(where, entry)


def _checksum_errors(where, entry):
    """Problems of an entry's base_sha256 and result_sha256."""
    errors = []
    base = entry.get("base_sha256")
    if base is not None and not (isinstance(base, str) and SHA_RE.match(base)):
        errors.append("%s.base_sha256 must be 64 lowercase hex digits or null (new file), found %r" % (where, base))
    result = entry.get("result_sha256")
    if not (isinstance(result, str) and SHA_RE.match(result)):
        errors.append("%s.result_sha256 must be 64 lowercase hex digits, found %r" % (where, result))
    elif result == base:
        errors.append("%s: base_sha256 equals result_sha256, the entry changes nothing" % where)
    return errors


def _source_errors(where, entry):
    """Problems of an entry's overlay / diff: exactly one, a path relative to the patch set."""
    errors = []
    sources = [key for key in ("overlay", "diff") if entry.get(key) is not None]
    if len(sources) != 1:
        errors.append("%s needs exactly one of overlay or diff, found %s" % (where, sources or "neither"))
    for key in sources:
        if not _safe_relpath(entry[key]):
            errors.append("%s.%s must be a path relative to the patch set, found %r" % (where, key, entry[key]))
    return errors


def _verify_errors(verify):
    """Problems of the manifest's verify mapping."""
    if not isinstance(verify, dict):
        return ["verify must be a mapping with imports / defines / compile"]
    errors = []
    unknown = sorted(set(verify) - VERIFY_KEYS)
    if unknown:
        errors.append("verify has unknown keys %s; allowed: %s" % (unknown, sorted(VERIFY_KEYS)))
    for module in _as_list(verify.get("imports")):
        if not isinstance(module, str) or not MODULE_RE.match(module):
            errors.append("verify.imports entries must be dotted module names, found %r" % (module,))
    for define in _as_list(verify.get("defines")):
        if not isinstance(define, str) or not DEFINE_RE.match(define):
            errors.append("verify.defines entries must read 'module:Name.attr', found %r" % (define,))
    if "compile" in verify and not isinstance(verify["compile"], bool):
        errors.append("verify.compile must be true or false, found %r" % (verify["compile"],))
    return errors


def _as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def check_manifest(manifest):
    errors = manifest_errors(manifest)
    if errors:
        raise PatchsetError("patch set manifest is invalid: " + "; ".join(errors), errors=errors)
    return manifest


# --------------------------------------------------------------------------- content


def _source_file(src, relpath):
    return os.path.join(src, *relpath.split("/"))


def target_file(site_packages, relpath):
    return os.path.join(site_packages, *relpath.split("/"))


def result_content(src, entry, current):
    """The bytes the entry turns `current` into; refuses when they do not hash to result_sha256."""
    path = entry["path"]
    if entry.get("overlay"):
        source = _source_file(src, entry["overlay"])
        data = read_bytes(source)
        if data is None:
            raise PatchsetError("%s: overlay %s is missing from the patch set" % (path, source), file=path)
    else:
        source = _source_file(src, entry["diff"])
        diff = read_bytes(source)
        if diff is None:
            raise PatchsetError("%s: diff %s is missing from the patch set" % (path, source), file=path)
        try:
            touched, data = apply_diff(diff, current)
        except DiffError as exc:
            raise PatchsetError("%s: diff %s does not apply: %s" % (path, entry["diff"], exc), file=path) from exc
        if touched != path:
            raise PatchsetError("%s: diff %s touches %s, expected %s" % (path, entry["diff"], touched, path), file=path)
    found = sha256_bytes(data)
    if found != entry["result_sha256"]:
        raise PatchsetError(
            "%s: the patched content from %s has sha256 %s, the manifest expects result_sha256 %s; "
            "the patch set is corrupt or was edited without re-running scripts/make-patchset"
            % (path, entry.get("overlay") or entry.get("diff"), found, entry["result_sha256"]),
            file=path,
            expected_sha256=entry["result_sha256"],
            found_sha256=found,
        )
    return data


def dist_version(site_packages, dist="sglang"):
    """Version from `<dist>-<version>.dist-info/METADATA`, or None when not installed."""
    for meta in sorted(glob.glob(os.path.join(site_packages, "%s-*.dist-info" % dist, "METADATA"))):
        with open(meta, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():
                    break
    return None


def validate(src, manifest=None, source_tree=None):
    """Controller-side check before any host change.

    Manifest schema, overlay / diff files present, overlays hashing to result_sha256, and with
    `source_tree` (a pristine site-packages of the target version): sglang version, base checksums,
    and diffs applying to the base with the expected result.
    """
    if manifest is None:
        manifest = load_manifest(src)
    check_manifest(manifest)
    errors = []
    report = []
    for entry in manifest["files"]:
        row, entry_errors = _validate_entry(src, entry, source_tree)
        report.append(row)
        errors.extend(entry_errors)
    if source_tree is not None:
        errors.extend(_version_errors(source_tree, manifest["sglang_version"]))
    if errors:
        raise PatchsetError(
            "patch set %s (%s) is invalid: %s" % (manifest.get("name"), src, "; ".join(errors)), errors=errors
        )
    return {"name": manifest["name"], "sglang_version": manifest["sglang_version"], "files": report}


def _validate_entry(src, entry, source_tree):
    """The report row of one file entry, and its problems (see validate)."""
    path = entry["path"]
    row = {"path": path, "source": "overlay" if entry.get("overlay") else "diff", "base": "not checked"}
    current = None
    if source_tree is not None:
        current = read_bytes(target_file(source_tree, path))
        found = None if current is None else sha256_bytes(current)
        if found != entry.get("base_sha256"):
            row["base"] = "mismatch"
            return row, [_mismatch_message(path, entry["base_sha256"], entry["result_sha256"], found, source_tree)]
        row["base"] = "ok"
    elif entry.get("diff"):
        # Without a base we can only check that the diff parses and names the right file.
        return row, _diff_shape_errors(src, entry)
    try:
        result_content(src, entry, current)
    except PatchsetError as exc:
        return row, [exc.msg]
    return row, []


def _diff_shape_errors(src, entry):
    """Problems of an entry's diff read alone: missing, malformed, or touching another file."""
    path = entry["path"]
    diff = read_bytes(_source_file(src, entry["diff"]))
    if diff is None:
        return ["%s: diff %s is missing from the patch set" % (path, entry["diff"])]
    try:
        touched = [p.path for p in parse_diff(diff)]
    except DiffError as exc:
        return ["%s: diff %s is malformed: %s" % (path, entry["diff"], exc)]
    if touched != [path]:
        return ["%s: diff %s touches %s, expected only %s" % (path, entry["diff"], touched, path)]
    return []


def _version_errors(source_tree, sglang_version):
    """A problem when the source tree holds another sglang version than the patch set targets."""
    version = dist_version(source_tree)
    if version is not None and version != sglang_version:
        return ["source tree %s holds sglang %s, the patch set targets %s" % (source_tree, version, sglang_version)]
    return []


# --------------------------------------------------------------------------- plan


def _mismatch_message(path, base, result, found, root):
    return (
        "%s in %s: base checksum mismatch: expected base_sha256 %s (or result_sha256 %s when already "
        "applied), found %s; this sglang is not the one the patch set was made for — reinstall the "
        "pinned sglang or make the patch set again against this tree"
        % (path, root, base or "absent (new file)", result, found or "absent")
    )


def plan(site_packages, manifest, state):
    """Per file: what `state` (applied / reverted) needs. Refuses before any change on a mismatch."""
    rows = []
    for entry in manifest["files"]:
        path = entry["path"]
        base, result = entry.get("base_sha256"), entry["result_sha256"]
        found = sha256_file(target_file(site_packages, path))
        if state == "applied":
            if found == result:
                action = "none"
            elif found == base:
                action = "create" if base is None else ("overlay" if entry.get("overlay") else "patch")
            else:
                raise PatchsetError(
                    _mismatch_message(path, base, result, found, site_packages),
                    file=path,
                    expected_sha256=base,
                    result_sha256=result,
                    found_sha256=found,
                )
            after = result
        else:
            if found == base:
                action = "none"
            elif found == result:
                action = "remove" if base is None else "restore"
            else:
                raise PatchsetError(
                    "%s in %s: cannot revert: expected result_sha256 %s (applied) or base_sha256 %s "
                    "(original), found %s; the file was changed after the patch set was applied — "
                    "reinstall sglang into this release instead"
                    % (path, site_packages, result, base or "absent (new file)", found or "absent"),
                    file=path,
                    expected_sha256=result,
                    base_sha256=base,
                    found_sha256=found,
                )
            after = base
        rows.append({"path": path, "action": action, "before_sha256": found, "after_sha256": after})
    return rows


# --------------------------------------------------------------------------- writes


def _mode_of(path, default=0o644):
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return default


def purge_pycache(path):
    """Remove the compiled files of one module (`__pycache__/<stem>.*.pyc` and a legacy `<stem>.pyc`)."""
    directory, filename = os.path.split(path)
    stem = filename[:-3] if filename.endswith(".py") else filename
    pattern = os.path.join(glob.escape(directory), "__pycache__", glob.escape(stem) + ".*.pyc")
    removed = []
    for pyc in [*sorted(glob.glob(pattern)), os.path.join(directory, stem + ".pyc")]:
        if os.path.isfile(pyc):
            os.unlink(pyc)
            removed.append(pyc)
    return removed


def byte_compile(python, paths, runner):
    """Compile `paths` with the venv's python so its __pycache__ holds fresh, matching .pyc files."""
    paths = [p for p in paths if p.endswith(".py") and os.path.isfile(p)]
    if not paths:
        return []
    rc, out, err = runner([python, "-m", "py_compile", *paths])
    if rc != 0:
        raise PatchsetError(
            "byte-compiling with %s failed (rc %d): %s" % (python, rc, (err or out).strip()[-2000:]),
            rc=rc,
            stderr=err,
        )
    return paths


def _write_state(backup_dir, manifest, rows):
    state = {
        "name": manifest["name"],
        "sglang_version": manifest["sglang_version"],
        "files": {
            e["path"]: {"base_sha256": e.get("base_sha256"), "result_sha256": e["result_sha256"]}
            for e in manifest["files"]
        },
        "backed_up": sorted(r["path"] for r in rows if r["action"] not in ("none", "create")),
    }
    os.makedirs(backup_dir, exist_ok=True)
    write_atomically(os.path.join(backup_dir, STATE_FILE), json.dumps(state, indent=2) + "\n", 0o644)


def _rollback(done):
    """Best effort: put back what an interrupted apply/revert already wrote."""
    for path, original, mode in reversed(done):
        try:
            if original is None:
                if os.path.exists(path):
                    os.unlink(path)
            else:
                write_atomically(path, original, mode)
        except OSError:
            pass


def apply(
    src, site_packages, backup_dir, manifest, python, *, runner=subprocess_runner, check_mode=False, check_version=True
):
    """Bring every file of the set to its result checksum. Returns {changed, files, pycache_purged, compiled}."""
    check_manifest(manifest)
    if check_version:
        installed = dist_version(site_packages)
        if installed is not None and installed != manifest["sglang_version"]:
            raise PatchsetError(
                "patch set %s targets sglang %s, %s holds sglang %s; use the patch set made for %s"
                % (manifest["name"], manifest["sglang_version"], site_packages, installed, installed),
                expected_version=manifest["sglang_version"],
                found_version=installed,
            )
    rows = plan(site_packages, manifest, "applied")
    todo = [r for r in rows if r["action"] != "none"]
    result = {"changed": bool(todo), "files": rows, "pycache_purged": [], "compiled": []}
    if not todo:
        return result
    entries = {e["path"]: e for e in manifest["files"]}
    # Everything is computed and checked before the first write.
    staged = []
    for row in todo:
        target = target_file(site_packages, row["path"])
        current = read_bytes(target)
        if check_mode and not os.path.isdir(src):
            new = None  # check mode on a host that has not received the patch set yet
        else:
            new = result_content(src, entries[row["path"]], current)
        staged.append((row, target, current, new))
    if check_mode:
        return result
    _write_state(backup_dir, manifest, rows)
    done = []
    try:
        for row, target, current, new in staged:
            mode = _mode_of(target)
            if current is not None:
                backup = target_file(os.path.join(backup_dir, "files"), row["path"])
                os.makedirs(os.path.dirname(backup), exist_ok=True)
                write_atomically(backup, current, mode)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
            write_atomically(target, new, mode)
            done.append((target, current, mode))
    except BaseException:
        _rollback(done)
        raise
    return _refresh_bytecode(result, [target for target, _current, _mode in done], python, runner)


def _refresh_bytecode(result, touched, python, runner):
    """Purge the stale ``__pycache__`` entries of every touched module and byte-compile what still exists."""
    for target in touched:
        result["pycache_purged"].extend(purge_pycache(target))
    result["compiled"] = byte_compile(python, [t for t in touched if os.path.exists(t)], runner)
    return result


def revert(site_packages, backup_dir, manifest, python, *, runner=subprocess_runner, check_mode=False):
    """Restore every file of the set to its base checksum from the backups; remove files the set created."""
    check_manifest(manifest)
    rows = plan(site_packages, manifest, "reverted")
    todo = [r for r in rows if r["action"] != "none"]
    result = {"changed": bool(todo), "files": rows, "pycache_purged": [], "compiled": []}
    if not todo:
        return result
    staged = []
    for row in todo:
        target = target_file(site_packages, row["path"])
        original = None
        if row["action"] == "restore":
            backup = target_file(os.path.join(backup_dir, "files"), row["path"])
            original = read_bytes(backup)
            found = None if original is None else sha256_bytes(original)
            if found != row["after_sha256"]:
                raise PatchsetError(
                    "%s: cannot revert: backup %s has sha256 %s, expected the base_sha256 %s; "
                    "reinstall sglang into this release instead"
                    % (row["path"], backup, found or "absent", row["after_sha256"]),
                    file=row["path"],
                    expected_sha256=row["after_sha256"],
                    found_sha256=found,
                )
        staged.append((target, read_bytes(target), original))
    if check_mode:
        return result
    done = []
    try:
        for target, current, original in staged:
            mode = _mode_of(target)
            if original is None:
                os.unlink(target)
            else:
                write_atomically(target, original, mode)
            done.append((target, current, mode))
    except BaseException:
        _rollback(done)
        raise
    return _refresh_bytecode(result, [target for target, _current, _mode in done], python, runner)


# --------------------------------------------------------------------------- verify

# Runs inside the venv's python (a real module, patchset_verify.py): compiles the touched files, then
# either imports the modules and resolves the defines (import mode) or finds the defines in the modules'
# syntax trees (compile mode).
VERIFY_SCRIPT = source_of(patchset_verify)

DETECT_TORCH = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"
SITE_PACKAGES = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def resolve_site_packages(python, runner=subprocess_runner):
    rc, out, err = runner([python, "-c", SITE_PACKAGES])
    if rc != 0 or not out.strip():
        raise PatchsetError(
            "could not ask %s for its site-packages (rc %d): %s; is the venv built?"
            % (python, rc, (err or out).strip()),
            python=python,
        )
    return out.strip().splitlines()[-1]


def resolve_verify_mode(mode, python, runner=subprocess_runner):
    """auto → import when torch is importable in the venv (a GPU venv), else compile (AST / compile())."""
    if mode != "auto":
        return mode
    rc, _out, _err = runner([python, "-c", DETECT_TORCH])
    return "import" if rc == 0 else "compile"


def verify(site_packages, manifest, python, *, mode="auto", runner=subprocess_runner, reverted=False):
    """Check every file is at its result checksum (base with `reverted`), then run the verify step in the venv.

    After a revert the manifest's `defines` are not checked (the originals do not have them); the
    touched files must still compile and, in import mode, the modules must still import.
    """
    check_manifest(manifest)
    mode = resolve_verify_mode(mode, python, runner)
    key = "base_sha256" if reverted else "result_sha256"
    checksums = []
    errors = []
    for entry in manifest["files"]:
        expected = entry.get(key)
        found = sha256_file(target_file(site_packages, entry["path"]))
        ok = found == expected
        checksums.append({"path": entry["path"], "ok": ok, "expected_sha256": expected, "found_sha256": found})
        if not ok:
            errors.append(
                "%s: expected %s %s, found %s (patch set %s?)"
                % (
                    entry["path"],
                    key,
                    expected or "absent",
                    found or "absent",
                    "not reverted" if reverted else "not applied",
                )
            )
    spec = manifest.get("verify") or {}
    compile_paths = []
    if spec.get("compile", True):
        compile_paths = [
            target_file(site_packages, e["path"])
            for e in manifest["files"]
            if e["path"].endswith(".py") and not (reverted and e.get("base_sha256") is None)
        ]
    cfg = {
        "mode": mode,
        "site_packages": site_packages,
        "compile": compile_paths,
        "imports": []
        if reverted and any(e.get("base_sha256") is None for e in manifest["files"])
        else _as_list(spec.get("imports")),
        "defines": [] if reverted else _as_list(spec.get("defines")),
    }
    rc, out, err = runner([python, "-c", VERIFY_SCRIPT, json.dumps(cfg)])
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report = {
            "mode": mode,
            "compiled": [],
            "imported": [],
            "defines": [],
            "errors": ["verify script failed in %s (rc %d): %s" % (python, rc, (err or out).strip()[-2000:])],
        }
    report["checksums"] = checksums
    report["errors"] = errors + report["errors"]
    report["ok"] = not report["errors"]
    return report
