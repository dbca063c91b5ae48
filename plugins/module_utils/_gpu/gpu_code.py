# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does the release carry GPU code for the selected GPUs? Pure, stdlib only.

``check_gpu_code(manifest, data, capabilities, ...)`` compares, for each compute capability of the
selected GPUs (``12.0`` on an RTX PRO 6000 Blackwell):

- each package of the manifest that carries compiled GPU code (``data['packages']``, from
  ``roles/sglang_preflight/files/gpu_code.yml``): its required libraries must hold SASS for the
  capability (or PTX the driver can compile); where the host's venv held the file, what its
  ``.nv_fatbin`` section says (``readings``, from ``cuda_fatbin``) wins over the data;
- the attention backend the service runs (``sglang_service_attention_backend``, or the one sglang
  picks per GPU when it is empty) and the sampling backend (``sglang_service_sampling_backend``, or
  sglang's default when it is empty): a backend whose library has no code for the capability, or
  that does not run on it, is refused;
- a backend whose kernels are compiled at run time by the host's CUDA compiler (flashinfer) needs
  a precompiled package in the manifest (flashinfer-cubin) or a compiler on the host.

Returns ``{ok, reasons, errors, not_checked}``: an error names the library, the capability and what
the library holds; a reason says why a capability is covered and where that was read.
"""

from __future__ import annotations

from ansible_collections.specdec.sglang.plugins.module_utils._gpu.cuda_fatbin import describe, runs_on, sm_of


def _read(data: dict, text) -> str:
    """A fact's source with ``{sglang}`` replaced by the sglang version(s) of ``sglang_source``."""
    versions = ", ".join(str(v) for v in (data.get("sglang_source") or {}))
    return str(text or "no source recorded").replace("{sglang}", versions or "(version not recorded)")


def _version(entry: dict) -> str:
    return str(entry.get("version") or "").split("+", 1)[0]


def _pinned(manifest: list[dict], data: dict) -> dict:
    """``{name: (version, package data or None)}`` for the manifest's packages that the data knows by name."""
    found = {}
    for entry in manifest or []:
        name = str(entry.get("name") or "")
        versions = (data.get("packages") or {}).get(name)
        if versions is not None:
            found[name] = (_version(entry), versions.get(_version(entry)))
    return found


def _names(manifest: list[dict]) -> set:
    return {str(e.get("name") or "") for e in manifest or []}


def flag_value(flags: list[str], name: str) -> str | None:
    """``--sampling-backend pytorch`` (one item or two) / ``--sampling-backend=pytorch`` -> ``pytorch``."""
    items = [str(f) for f in flags or []]
    for position, flag in enumerate(items):
        parts = flag.replace("=", " ", 1).split()
        if parts and parts[0] == name:
            if len(parts) > 1:
                return parts[1]
            return items[position + 1] if position + 1 < len(items) else ""
    return None


def default_attention(data: dict, capability: str, tree: bool) -> str:
    """The attention backend sglang picks on ``capability`` when none is given (MHA models)."""
    rule = data.get("attention_default") or {}
    major = str(capability).split(".", 1)[0]
    chosen = (rule.get("by_major") or {}).get(major)
    if chosen is None:
        return str(rule.get("otherwise") or "")
    return str(chosen["tree" if tree else "chain"])


def _library_code(pin_name: str, version: str, library: dict, readings: dict) -> tuple:
    """(sass, ptx, arch_specific, where) of one library: the host's file when it was read, else the data.

    ``arch_specific``: (SASS SMs, PTX SMs) held only as ``sm_XYa`` code, which runs on X.Y alone."""
    reading = (readings or {}).get(library.get("path") or "")
    if reading and not reading.get("error"):
        arch = (reading.get("sass_arch_specific") or [], reading.get("ptx_arch_specific") or [])
        return reading["sass"], reading["ptx"], arch, f"read from {reading.get('file') or library['path']} on the host"
    where = f"data for {pin_name} {version}: {library.get('read', 'no source recorded')}"
    if reading and reading.get("error"):
        where += f" (the host's file could not be read: {reading['error']})"
    arch = (list(library.get("sass_arch_specific") or []), list(library.get("ptx_arch_specific") or []))
    return list(library.get("sass") or []), list(library.get("ptx") or []), arch, where


def _loaded_libraries(package: dict, capability: str) -> list[dict]:
    """The libraries of ``package`` that load on ``capability`` (its loader picks one variant directory)."""
    loader = package.get("loader") or {}
    variant = (loader.get("exact") or {}).get(capability, loader.get("otherwise"))
    return [lib for lib in package.get("libraries") or [] if lib.get("variant") in (None, variant)]


class _Check:
    """One run of the check: the inputs it reads and the result it fills."""

    def __init__(self, manifest, data, readings, host_compiler):
        self.manifest = manifest or []
        self.data = data or {}
        self.pins = _pinned(manifest, data)
        self.readings = readings or {}
        self.host_compiler = host_compiler
        self.result: dict = {"reasons": [], "errors": [], "not_checked": []}

    def library(self, pin: tuple, library: dict, capability: str, why: str = "") -> bool:
        name, version = pin
        sass, ptx, arch, where = _library_code(name, version, library, self.readings)
        how = runs_on(capability, sass, ptx, *arch)
        label = f"{name} {version} {library['name']}" + (f" ({library['variant']}/)" if library.get("variant") else "")
        if how is None:
            self.result["errors"].append(
                f"{label}{why} has no code for compute capability {capability} (sm_{sm_of(capability)}):"
                f" it holds {describe(sass, ptx, *arch)} ({where})"
            )
            return False
        self.result["reasons"].append(f"{capability}: {label}{why} runs as {how} ({where})")
        return True

    def packages(self, capability: str) -> None:
        for name, (version, package) in sorted(self.pins.items()):
            if package is None:
                self.result["not_checked"].append(
                    f"{name} {version} is not in the GPU code data: its GPU code is not checked"
                )
                continue
            for library in _loaded_libraries(package, capability):
                if library.get("required"):
                    self.library((name, version), library, capability)
            if package.get("compiles_at_run_time") == "bundled":
                self.result["reasons"].append(
                    f"{capability}: {name} {version} compiles at run time ({_read(self.data, package.get('read'))})"
                )

    def backend(self, attention: str, origin: str, capability: str) -> None:
        spec = (self.data.get("attention_backends") or {}).get(attention)
        label = f"attention backend {attention} ({origin})"
        if spec is None:
            self.result["not_checked"].append(f"{label}: no GPU code data for it, not checked on {capability}")
            return
        majors = spec.get("capability_majors")
        if majors is not None and int(str(capability).split(".", maxsplit=1)[0]) not in majors:
            self.result["errors"].append(
                f"{label} does not run on compute capability {capability}: it runs on major"
                f" {', '.join(str(m) for m in majors)} only ({_read(self.data, spec.get('read'))})"
            )
            return
        lib = spec.get("library")
        if lib:
            version, package = self.pins.get(lib["package"], ("", None))
            if package is None:
                self.result["not_checked"].append(
                    f"{label}: {lib['package']} is not pinned with GPU code data, not checked"
                )
                return
            library = next((x for x in package.get("libraries") or [] if x["name"] == lib["name"]), None)
            if library is not None:
                self.library((lib["package"], version), library, capability, why=f" for {label}")
            return
        if spec.get("package") and spec["package"] != "flashinfer-python":
            if spec["package"] in self.pins:
                self.result["reasons"].append(
                    f"{capability}: {label} runs on {spec['package']} ({_read(self.data, spec.get('read'))})"
                )
            else:
                self.result["errors"].append(f"{label} needs {spec['package']}, which the manifest does not hold")

    def sampling(self, backend: str, origin: str, capability: str) -> None:
        """A sampling backend that runs on a package of its own (pytorch: torch, checked with the packages)."""
        spec = (self.data.get("sampling_backends") or {}).get(backend)
        label = f"sampling backend {backend} ({origin})"
        if spec is None:
            self.result["not_checked"].append(f"{label}: no GPU code data for it, not checked on {capability}")
            return
        package = spec.get("package")
        if not package or package == "flashinfer-python":
            return  # flashinfer: checked with the attention backend's users of flashinfer-python
        if package in self.pins:
            self.result["reasons"].append(
                f"{capability}: {label} runs on {package} ({_read(self.data, spec.get('read'))})"
            )
        else:
            self.result["errors"].append(f"{label} needs {package}, which the manifest does not hold")

    def flashinfer(self, capability: str, used_by: list[str], precompiled: list[str] | None = None) -> None:
        """flashinfer's kernels for ``used_by``: precompiled (``precompiled``, default the package's list) in
        the manifest, or compiled at run time with the host's nvcc; an error naming both ways otherwise."""
        if "flashinfer-python" not in self.pins:
            self.result["errors"].append(
                f"{', '.join(used_by)} on {capability} needs flashinfer-python, which the manifest does not hold"
            )
            return
        version, package = self.pins["flashinfer-python"]
        users = ", ".join(used_by)
        if package is None:
            self.result["not_checked"].append(
                f"flashinfer-python {version} is not in the GPU code data: {users} on {capability} not checked"
            )
            return
        holders = list(precompiled if precompiled is not None else package.get("precompiled") or [])
        brought = sorted(_names(self.manifest) & set(holders))
        if brought:
            self.result["reasons"].append(
                f"{capability}: flashinfer-python {version} ({users}) takes its kernels from"
                f" {', '.join(brought)} in the manifest"
            )
        elif self.host_compiler:
            self.result["reasons"].append(
                f"{capability}: flashinfer-python {version} ({users}) compiles its kernels at run time with"
                f" {self.host_compiler} on the host"
            )
        else:
            advice = (
                " or choose backends without flashinfer (sglang_service_attention_backend: triton and"
                " sglang_service_sampling_backend: pytorch, the roles' defaults)"
                if precompiled is None
                else ""
            )
            self.result["errors"].append(
                f"flashinfer-python {version} ({users} on compute capability {capability}) is pure Python:"
                f" its kernels come from {' or '.join(holders)} or are compiled at run"
                " time by nvcc, and the manifest holds neither package and the host has no nvcc (PATH,"
                f" CUDA_HOME/bin, /usr/local/cuda/bin). Add {holders[0] if holders else 'flashinfer-cubin'}=={version}"
                f" to sglang_runtime_manifest or install a CUDA toolkit on the host{advice}"
            )


def check_gpu_code(
    manifest: list[dict],
    data: dict,
    capabilities: list,
    *,
    attention_backend: str = "",
    sampling_backend: str = "",
    extra_flags: list[str] | None = None,
    tree: bool = False,
    readings: dict | None = None,
    host_compiler: str | None = None,
    target_architecture: str = "",
) -> dict:
    """``{ok, reasons, errors, not_checked}`` for the manifest and backends on the GPUs' capabilities.

    ``attention_backend`` / ``sampling_backend``: the service's choices (``""``: sglang picks, as the data's
    ``attention_default`` and ``sampling_default`` say); ``extra_flags`` is read for ``--attention-backend``
    only where ``attention_backend`` is empty. ``target_architecture`` (``dense`` / ``hybrid_gdn``, ``""``
    unknown): the data's ``flashinfer_by_architecture`` names what of such a target runs flashinfer's kernels
    whatever the backends (a hybrid target's RMSNorm).
    """
    check = _Check(manifest, data, readings, host_compiler)
    by_architecture = (check.data.get("flashinfer_by_architecture") or {}).get(str(target_architecture or ""))
    known = sorted({str(c) for c in capabilities if c})
    if any(not c for c in capabilities):
        check.result["not_checked"].append(
            "a selected GPU's compute capability is unknown (nvidia-smi did not report compute_cap):"
            " its compiled code is not checked"
        )
    sampling = str(sampling_backend or "")
    chosen = str(attention_backend or flag_value(extra_flags or [], "--attention-backend") or "")
    for capability in known:
        check.packages(capability)
        attention = chosen or default_attention(check.data, capability, tree)
        origin = "sglang_service_attention_backend" if chosen else "sglang's default on this GPU"
        check.backend(attention, origin, capability)
        effective = sampling or str((check.data.get("sampling_default") or {}).get("backend") or "")
        if sampling:
            check.sampling(sampling, "sglang_service_sampling_backend", capability)
        used_by = []
        if attention == "flashinfer":
            used_by.append(f"attention backend flashinfer, {origin}")
        if effective == "flashinfer" and (sampling or "flashinfer-python" in check.pins):
            source = "sglang_service_sampling_backend" if sampling else "sglang's default sampling backend"
            used_by.append(f"sampling backend flashinfer, {source}")
        if used_by:
            check.flashinfer(capability, used_by)
        if by_architecture and "flashinfer-python" in check.pins:
            user = str(by_architecture.get("user") or target_architecture)
            check.flashinfer(capability, [user], precompiled=list(by_architecture.get("precompiled") or []))
    return dict(check.result, ok=not check.result["errors"])


def files_to_read(manifest: list[dict], data: dict) -> list[dict]:
    """``[{package, version, path}]``: the pinned packages' libraries (under site-packages) for the host to read."""
    wanted: list[dict] = []
    for name, (version, package) in sorted(_pinned(manifest, data).items()):
        for library in (package or {}).get("libraries") or []:
            if library.get("path") and not any(w["path"] == library["path"] for w in wanted):
                wanted.append({"package": name, "version": version, "path": library["path"]})
    return wanted
