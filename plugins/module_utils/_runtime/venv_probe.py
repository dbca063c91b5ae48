# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release venv probe: runs inside the venv's own python, standard library only.

``python -c <this file's source> SPEC_JSON`` (see runtime_probe.run_python) runs one program,
named by ``spec["program"]``:

- ``packages``: the installed version of each package (``importlib.metadata``), the import of
  each module, ``torch.__version__`` and ``torch.version.cuda``;
- ``cuda``: a small matmul on the one GPU the process sees, compared with the CPU result.

It prints one JSON document between marker lines, so that warnings printed by imported packages
cannot corrupt the result. Nothing here imports Ansible: the venv does not have it.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback

BEGIN = "SPECDEC-PROBE-BEGIN"
END = "SPECDEC-PROBE-END"


def distribution_info(name: str) -> dict:
    """Version and location of distribution `name` (tried as given, with _ and with -)."""
    import importlib.metadata as md  # noqa: PLC0415 - stdlib, but only where the probe runs

    entry = {"version": None, "location": None}
    for candidate in (name, name.replace("-", "_"), name.replace("_", "-")):
        try:
            dist = md.distribution(candidate)
        except md.PackageNotFoundError:
            continue
        entry["version"] = dist.version
        try:
            entry["location"] = str(dist.locate_file(""))
        except Exception:  # a location is a nicety, never a failure
            pass
        break
    return entry


def import_report(module: str, out: dict) -> dict:
    """Import `module`: ok, version, file, or the error; torch also fills out's torch fields."""
    result = {"ok": False, "version": None, "file": None, "error": None, "error_type": None}
    try:
        mod = importlib.import_module(module)
        result["ok"] = True
        version = getattr(mod, "__version__", None)
        result["version"] = None if version is None else str(version)
        result["file"] = getattr(mod, "__file__", None)
        if module == "torch":
            out["torch_version"] = str(mod.__version__)
            out["torch_cuda"] = getattr(getattr(mod, "version", None), "cuda", None)
    except BaseException as exc:  # a native crash in an import is the finding
        result["error_type"] = type(exc).__name__
        result["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return result


def packages(spec: dict) -> dict:
    out = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "prefix": sys.prefix,
        "packages": {},
        "imports": {},
        "torch_cuda": None,
        "torch_version": None,
    }
    items = spec.get("packages", [])
    for item in items:
        out["packages"][item["name"]] = distribution_info(item["name"])
    for item in items:
        module = item.get("import")
        if module and module not in out["imports"]:
            out["imports"][module] = import_report(module, out)
    return out


def _matmul(torch, spec: dict, out: dict) -> None:
    out["device_name"] = torch.cuda.get_device_name(0)
    out["capability"] = list(torch.cuda.get_device_capability(0))
    out["stage"] = "matmul"
    n = int(spec.get("size", 512))
    gen = torch.Generator().manual_seed(1234)
    a = torch.randn(n, n, generator=gen, dtype=torch.float32)
    b = torch.randn(n, n, generator=gen, dtype=torch.float32)
    ref = a @ b
    got = (a.to("cuda:0") @ b.to("cuda:0")).cpu()
    torch.cuda.synchronize()
    out["max_abs_diff"] = float((got - ref).abs().max())
    tol = float(spec.get("tolerance", 1e-2)) * float(ref.abs().max())
    out["tolerance"] = tol
    out["stage"] = "compare"
    if out["max_abs_diff"] <= tol:
        out["ok"] = True
    else:
        out["error"] = "GPU result differs from CPU: max |diff| %.6g > %.6g" % (out["max_abs_diff"], tol)


def cuda(spec: dict) -> dict:
    """The matmul check on the GPU this process sees (CUDA_VISIBLE_DEVICES=<one uuid>)."""
    out = {"ok": False, "stage": "import", "device_name": None, "max_abs_diff": None, "error": None}
    started = time.time()
    try:
        import torch  # noqa: PLC0415 - only the release venv has it

        out["stage"] = "init"
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
        if not out["cuda_available"] or out["device_count"] < 1:
            out["error"] = "torch.cuda.is_available() is False (no usable CUDA device visible)"
        else:
            _matmul(torch, spec, out)
    except BaseException as exc:  # every failure is classified by the caller
        out["error"] = "%s: %s" % (type(exc).__name__, exc)
    out["elapsed_s"] = round(time.time() - started, 3)
    return out


PROGRAMS = {"packages": packages, "cuda": cuda}


def main(argv: list) -> None:
    """Run the program the spec in argv[0] names; its result goes to stdout between the marker lines."""
    spec = json.loads(argv[0])
    out = PROGRAMS[spec["program"]](spec)
    sys.stdout.write("%s\n%s\n%s\n" % (BEGIN, json.dumps(out), END))


if __name__ == "__main__":
    main(sys.argv[1:])
