# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Weights integrity of a model directory, before the server is started on it.

What is checked, in this order (the first problem ends the check and names its file):

1. ``config.json`` is there and parses as a JSON object; the tokenizer is there when asked for
   (``tokenizer.json``, ``tokenizer.model`` or ``vocab.json``: a DFlash draft has none, it uses the
   target's).
2. The shards: those ``model.safetensors.index.json`` names in its ``weight_map`` (each must be in
   the directory), else every ``*.safetensors`` file of the directory (at least one).
3. Each shard's header: an 8-byte little-endian length N, then N bytes of JSON (an object of
   tensors, each with ``dtype``, ``shape`` and ``data_offsets [begin, end]``). The tensors' byte
   ranges must tile the data section without gap or overlap, each range as long as its shape and
   dtype say, and the data section must end exactly at the file's end: a copy cut short (an
   interrupted rsync of 54 GB) or padded is found from its header and size alone, in milliseconds.
4. Optionally (``sha256``), the sha256 of every checked file against a manifest recorded at an
   earlier good deploy: slow (minutes for 54 GB), off by default.

Every file access goes through a ``Files`` object (``listdir``, ``size``, ``read_head``,
``read_text``, ``sha256``), so the unit tests use in-memory directories.

Stdlib only (Python >= 3.9): this runs on the target host.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time

FAILURE_CLASS = "model_integrity"
CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
# A header larger than this is not a header (safetensors itself refuses above 100 MB).
MAX_HEADER_BYTES = 100 * 1000 * 1000
MANIFEST_VERSION = 1

# Bytes per element of each safetensors dtype (F8 variants are one byte; sub-byte types are
# not checked for length, only for tiling).
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "C64": 8,
}


class IntegrityError(Exception):
    """One problem of one file: ``path`` names it, ``problem`` says what was found and expected."""

    def __init__(self, path, problem):
        Exception.__init__(self, "%s: %s" % (path, problem))
        self.path = path
        self.problem = problem


class Files:
    """The real file system (the unit tests pass an in-memory double with the same methods)."""

    @staticmethod
    def listdir(path):
        return sorted(os.listdir(path))

    @staticmethod
    def isdir(path):
        return os.path.isdir(path)

    @staticmethod
    def size(path):
        """Size in bytes, or None when there is no such regular file."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_size if not os.path.isdir(path) else None

    @staticmethod
    def read_head(path, offset, length):
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    @staticmethod
    def read_text(path):
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")

    @staticmethod
    def sha256(path, chunk=8 * 1024 * 1024):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while True:
                block = handle.read(chunk)
                if not block:
                    break
                digest.update(block)
        return digest.hexdigest()


def _join(directory, name):
    return directory.rstrip("/") + "/" + name


def _header_length(head8, file_size):
    if file_size < 8 or len(head8) < 8:
        raise ValueError("%d bytes: too short for a safetensors file (8-byte header length first)" % file_size)
    (length,) = struct.unpack("<Q", head8[:8])
    if length < 2 or length > MAX_HEADER_BYTES:
        raise ValueError("header length %d is not a safetensors header length (2..%d)" % (length, MAX_HEADER_BYTES))
    if 8 + length > file_size:
        raise ValueError(
            "header says %d header bytes, the file has only %d bytes after the length: the file is cut short"
            % (length, file_size - 8)
        )
    return length


def _decode_header(raw, length):
    if len(raw) != length:
        raise ValueError("read %d of the %d header bytes: the file is cut short" % (len(raw), length))
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError("the %d-byte header is not JSON (%s)" % (length, exc)) from None
    if not isinstance(header, dict):
        raise ValueError("the header is JSON %s, expected an object of tensors" % type(header).__name__)
    return header


def _is_offsets(offsets):
    return (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in offsets)
        and 0 <= offsets[0] <= offsets[1]
    )


def _tensor_range(name, entry):
    """(begin, end, name) of one header entry, its length checked against its dtype and shape."""
    if not isinstance(entry, dict):
        raise ValueError("tensor %r: expected an object with dtype, shape, data_offsets" % name)
    offsets, shape, dtype = entry.get("data_offsets"), entry.get("shape"), entry.get("dtype")
    if not _is_offsets(offsets):
        raise ValueError("tensor %r: data_offsets %r is not [begin, end] with 0 <= begin <= end" % (name, offsets))
    if not isinstance(shape, list) or not all(isinstance(v, int) and v >= 0 for v in shape):
        raise ValueError("tensor %r: shape %r is not a list of sizes" % (name, shape))
    if not isinstance(dtype, str):
        raise ValueError("tensor %r: dtype %r is not a string" % (name, dtype))
    if dtype in DTYPE_BYTES:
        count = 1
        for dim in shape:
            count *= dim
        want = count * DTYPE_BYTES[dtype]
        if offsets[1] - offsets[0] != want:
            raise ValueError(
                "tensor %r: %s %r needs %d bytes, data_offsets %r cover %d"
                % (name, dtype, shape, want, offsets, offsets[1] - offsets[0])
            )
    return offsets[0], offsets[1], name


def _data_end(ranges):
    """Where the tensors end, once they are checked to tile the data section from byte 0."""
    position = 0
    for begin, end, name in sorted(ranges):
        if begin != position:
            raise ValueError(
                "tensor %r starts at data byte %d, expected %d: the tensors %s"
                % (name, begin, position, "overlap" if begin < position else "leave a gap")
            )
        position = end
    return position


def parse_header(head8, read_json_bytes, file_size):
    """Check one safetensors file from its first 8 bytes and a reader of its header.

    ``read_json_bytes(n)`` returns the n header bytes after the length. Returns a summary dict
    (tensors, header_bytes, data_bytes); raises ValueError with what was found otherwise.
    """
    length = _header_length(head8, file_size)
    header = _decode_header(read_json_bytes(length), length)
    ranges = [_tensor_range(name, entry) for name, entry in header.items() if name != "__metadata__"]
    position = _data_end(ranges)
    data_bytes = file_size - 8 - length
    if position > data_bytes:
        raise ValueError(
            "the header's tensors need %d data bytes, the file holds %d: the file is cut short by %d bytes"
            % (position, data_bytes, position - data_bytes)
        )
    if position < data_bytes:
        raise ValueError(
            "the header's tensors end at data byte %d, the file holds %d: %d trailing bytes"
            % (position, data_bytes, data_bytes - position)
        )
    return {"tensors": len(ranges), "header_bytes": length, "data_bytes": data_bytes}


def check_safetensors(path, files):
    """parse_header for the file at ``path``; IntegrityError naming it otherwise."""
    size = files.size(path)
    if size is None:
        raise IntegrityError(path, "not found")
    try:
        head = files.read_head(path, 0, 8)
        return parse_header(head, lambda n: files.read_head(path, 8, n), size)
    except ValueError as exc:
        raise IntegrityError(path, str(exc)) from None
    except OSError as exc:
        raise IntegrityError(path, "cannot be read (%s)" % exc) from None


def _read_json(path, files, what):
    try:
        text = files.read_text(path)
    except OSError as exc:
        raise IntegrityError(path, "cannot be read (%s)" % exc) from None
    except UnicodeDecodeError:
        raise IntegrityError(path, "%s is not UTF-8 text" % what) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IntegrityError(path, "%s is not JSON (%s)" % (what, exc)) from None
    if not isinstance(data, dict):
        raise IntegrityError(path, "%s is JSON %s, expected an object" % (what, type(data).__name__))
    return data


def shards(directory, files):
    """The weight files of a model directory: the index's shards, else every *.safetensors file."""
    names = files.listdir(directory)
    if INDEX in names:
        index_path = _join(directory, INDEX)
        index = _read_json(index_path, files, "the safetensors index")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise IntegrityError(index_path, "no weight_map (tensor name -> shard file) in the index")
        wanted = sorted(set(str(v) for v in weight_map.values()))
        missing = [name for name in wanted if name not in names]
        if missing:
            raise IntegrityError(
                _join(directory, missing[0]),
                "named by %s (%d of %d shards missing: %s); copy the model again"
                % (INDEX, len(missing), len(wanted), ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")),
            )
        return wanted
    found = [name for name in names if name.endswith(".safetensors")]
    if not found:
        raise IntegrityError(
            _join(directory, "*.safetensors"),
            "no safetensors weights and no %s in the directory (found: %s)"
            % (INDEX, ", ".join(names[:8]) or "nothing"),
        )
    return found


def manifest_name(directory):
    """The manifest file name for a model directory (its path, made a file name)."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in directory.strip("/")) or "root"
    return cleaned + ".sha256.json"


def _check_layout(directory, files, require_tokenizer):
    if not files.isdir(directory):
        raise IntegrityError(directory, "not a directory; download the model there or point the path at it")
    names = files.listdir(directory)
    if CONFIG not in names:
        raise IntegrityError(_join(directory, CONFIG), "not found (found: %s)" % (", ".join(names[:8]) or "nothing"))
    _read_json(_join(directory, CONFIG), files, CONFIG)
    if require_tokenizer and not any(name in names for name in TOKENIZER_FILES):
        raise IntegrityError(
            _join(directory, TOKENIZER_FILES[0]),
            "no tokenizer (none of %s) in the directory" % ", ".join(TOKENIZER_FILES),
        )


def _compare_manifest(directory, checked, recorded):
    """Names and sizes of the checked files against a recorded manifest's."""
    gone = sorted(set(recorded) - set(checked))
    if gone:
        raise IntegrityError(_join(directory, gone[0]), "listed in the sha256 manifest, no longer a weight file here")
    new = sorted(set(checked) - set(recorded))
    if new:
        raise IntegrityError(
            _join(directory, new[0]), "not in the sha256 manifest recorded at the last good deploy (new or renamed)"
        )
    for name in sorted(checked):
        want = recorded[name].get("size") if isinstance(recorded[name], dict) else None
        if want != checked[name]["size"]:
            raise IntegrityError(
                _join(directory, name), "size %s, the manifest recorded %s" % (checked[name]["size"], want)
            )


def _compare_digests(directory, checked, recorded, files):
    for name in sorted(checked):
        digest = files.sha256(_join(directory, name))
        checked[name]["sha256"] = digest
        want = (recorded or {}).get(name, {}).get("sha256")
        if want and want != digest:
            raise IntegrityError(
                _join(directory, name), "sha256 %s, the manifest recorded %s: the bytes changed" % (digest, want)
            )


def check_directory(
    directory, *, require_tokenizer=True, files=None, sha256=False, manifest=None, clock=time.monotonic
):
    """Check a model directory; a summary dict, or IntegrityError for the first problem.

    ``manifest`` (a dict: {"files": {name: {"size": n, "sha256": hex}}}) is checked when given:
    sizes always, digests when ``sha256`` is true. The summary's ``files`` maps every checked file
    to its size (and its digest when ``sha256``), ready to be recorded as a manifest.
    """
    files = files or Files()
    started = clock()
    _check_layout(directory, files, require_tokenizer)
    weight_files = shards(directory, files)
    checked = {}
    tensors = 0
    for name in weight_files:
        summary = check_safetensors(_join(directory, name), files)
        tensors += summary["tensors"]
        checked[name] = {"size": 8 + summary["header_bytes"] + summary["data_bytes"]}
    recorded = manifest.get("files") if isinstance(manifest, dict) else None
    if manifest is not None and not isinstance(recorded, dict):
        raise IntegrityError(directory, "the sha256 manifest holds no files map")
    if recorded is not None:
        _compare_manifest(directory, checked, recorded)
    if sha256:
        _compare_digests(directory, checked, recorded, files)
    return {
        "path": directory,
        "shards": len(weight_files),
        "tensors": tensors,
        "bytes": sum(entry["size"] for entry in checked.values()),
        "files": checked,
        "sha256_checked": bool(sha256 and recorded is not None),
        "elapsed_s": round(clock() - started, 3),
    }


def manifest_of(summary):
    """The manifest to record for a checked directory (its summary with digests)."""
    return {"version": MANIFEST_VERSION, "path": summary["path"], "files": summary["files"]}


def encode_header(tensors, metadata=None):
    """A safetensors header for ``tensors`` [(name, dtype, shape)], laid out back to back.

    Returns (header bytes incl. the 8-byte length, data length). Used by the lab and the tests to
    write small but real safetensors files.
    """
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, dtype, shape in tensors:
        count = 1
        for dim in shape:
            count *= dim
        end = offset + count * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes
    return struct.pack("<Q", len(raw)) + raw, offset
