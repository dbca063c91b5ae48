# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Contract: the DDTree patch sets against the real sglang wheels they were made for.

ddtree-0.5.17 needs the 0.5.17 tree, ddtree-0.5.23 the 0.5.23 tree (the tier's `sglang_tree`
fixture fetches either). Each set: base checksums and diffs against the wheel, apply into a copy of the
touched files, compile-mode verify (every define in the patched syntax trees), revert byte-identical.

Then what each set changes in sglang's own machinery, on the patched real files: the functions that
decide (backend refusals, the mamba pool's tree layout and snapshot count, the 0.5.23 start-up and
verify-step checks) are executed on a CPU with their sglang imports stood in; what needs a GPU is held
to the real 0.5.23 signatures it calls (every keyword the 0.5.23 verify step passes is a parameter of
the function it calls there).
"""

import ast
import hashlib
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import types
from types import SimpleNamespace
from typing import Optional

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset as ps

REPO = pathlib.Path(__file__).resolve().parents[2]
PY = sys.executable


@pytest.fixture(scope="session")
def sglang_0_5_17_tree(sglang_tree) -> pathlib.Path:
    return sglang_tree("0.5.17")


@pytest.fixture(params=["0.5.17", "0.5.23"])
def case(request, sglang_source_tree):
    version = request.param
    tree = request.getfixturevalue("sglang_0_5_17_tree") if version == "0.5.17" else sglang_source_tree
    set_dir = REPO / "patchsets" / ("ddtree-" + version)
    return version, tree, set_dir, yaml.safe_load((set_dir / "patchset.yml").read_text())


def _site(tmp_path, tree, manifest):
    root = tmp_path / "site-packages"
    for entry in manifest["files"]:
        src = tree / entry["path"]
        if src.is_file():
            (root / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / entry["path"])
    dist = next(tree.glob("sglang-*.dist-info"))
    (root / dist.name).mkdir(parents=True)
    shutil.copy2(dist / "METADATA", root / dist.name / "METADATA")
    return root


def test_the_set_matches_its_wheel(case):
    version, tree, set_dir, manifest = case
    assert manifest["sglang_version"] == version
    report = ps.validate(str(set_dir), manifest, source_tree=str(tree))
    assert {row["base"] for row in report["files"]} == {"ok"}
    created = {e["path"] for e in manifest["files"] if e["base_sha256"] is None}
    assert "sglang/srt/speculative/ddtree_utils.py" in created
    assert "sglang/srt/speculative/ddtree_worker.py" in created  # both sets verify trees
    assert manifest["serves"]["algorithms"] == ["DDTREE"]


def test_apply_verify_revert_on_the_real_files(case, tmp_path):
    _version, tree, set_dir, manifest = case
    site = _site(tmp_path, tree, manifest)
    before = {e["path"]: (site / e["path"]).read_bytes() for e in manifest["files"] if e["base_sha256"]}
    backup = tmp_path / "backup"
    assert ps.apply(str(set_dir), str(site), str(backup), manifest, PY)["changed"] is True
    for entry in manifest["files"]:
        assert hashlib.sha256((site / entry["path"]).read_bytes()).hexdigest() == entry["result_sha256"]
    report = ps.verify(str(site), manifest, PY, mode="compile")
    assert report["errors"] == [], report["errors"]
    assert "sglang.srt.arg_groups.speculative_hook:_handle_ddtree" in manifest["verify"]["defines"]
    ps.revert(str(site), str(backup), manifest, PY)
    assert {p: (site / p).read_bytes() for p in before} == before
    assert not (site / "sglang/srt/speculative/ddtree_utils.py").exists()


def test_every_dflash_string_check_of_0_5_17_knows_ddtree(sglang_0_5_17_tree, tmp_path):
    """Every `"DFLASH"` literal of the pristine 0.5.17 tree, and where the patched file now stands."""
    set_dir = REPO / "patchsets" / "ddtree-0.5.17"
    manifest = yaml.safe_load((set_dir / "patchset.yml").read_text())
    hits = subprocess.run(
        ["grep", "-rln", '"DFLASH"', "--include=*.py", "sglang/srt"],
        cwd=sglang_0_5_17_tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # Left refusing DDTREE on purpose (docs/patchsets.md): replayssm ragged verify and the KDA check.
    refused = {"sglang/srt/mem_cache/kv_cache_configurator.py"}
    patched = {e["path"] for e in manifest["files"]}
    assert set(hits) - refused <= patched
    site = _site(tmp_path, sglang_0_5_17_tree, manifest)
    ps.apply(str(set_dir), str(site), str(tmp_path / "b"), manifest, PY)
    for rel in set(hits) - refused:
        text = (site / rel).read_text()
        assert "DDTREE" in text, rel


def test_porting_the_0_5_17_set_to_0_5_23_is_refused_by_hunk(sglang_source_tree, tmp_path):
    src = REPO / "patchsets" / "ddtree-0.5.17"
    proc = subprocess.run(
        [
            PY,
            str(REPO / "scripts" / "make-patchset"),
            "--port",
            str(src),
            "--base-tree",
            str(sglang_source_tree),
            "--out",
            str(tmp_path / "port"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "does not carry over" in proc.stderr and "matches nowhere" in proc.stderr


# --- hybrid (Gated DeltaNet) targets: what the 0.5.17 set changes in sglang's own machinery ------


def _applied(version, tree, tmp_path):
    set_dir = REPO / "patchsets" / ("ddtree-" + version)
    manifest = yaml.safe_load((set_dir / "patchset.yml").read_text())
    site = _site(tmp_path, tree, manifest)
    ps.apply(str(set_dir), str(site), str(tmp_path / "b"), manifest, PY)
    return site


def _applied_0_5_17(tree, tmp_path):
    return _applied("0.5.17", tree, tmp_path)


@pytest.fixture(params=["0.5.17", "0.5.23"])
def applied(request, sglang_source_tree, tmp_path):
    """(version, pristine tree, patched copy of the set's files) for each set."""
    version = request.param
    tree = request.getfixturevalue("sglang_0_5_17_tree") if version == "0.5.17" else sglang_source_tree
    return version, tree, _applied(version, tree, tmp_path)


def _functions(path, names, namespace):
    """Exec the named top-level functions of a source file (they must need only `namespace`)."""
    module = ast.parse(pathlib.Path(path).read_text())
    wanted = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert sorted(n.name for n in wanted) == sorted(names)
    code = compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec")
    exec(code, namespace)  # the functions of a real sglang file, to test them
    return namespace


def _server_args(algorithm, block, max_tokens, **extra):
    return SimpleNamespace(
        speculative_algorithm=algorithm,
        speculative_num_draft_tokens=block,
        max_speculative_num_draft_tokens=max_tokens,
        **extra,
    )


@pytest.mark.parametrize(("algorithm", "dense_windows", "steps"), [("DDTREE", True, 64), ("DFLASH", False, 16)])
def test_hybrid_pool_keeps_a_dense_window_and_a_snapshot_per_tree_node(
    sglang_0_5_17_tree, tmp_path, algorithm, dense_windows, steps
):
    site = _applied_0_5_17(sglang_0_5_17_tree, tmp_path)
    spec = SimpleNamespace(speculative_eagle_topk=1, speculative_num_draft_tokens=16)
    ns = _functions(
        site / "sglang/srt/mem_cache/kv_cache_configurator.py",
        ["_is_ddtree", "_mamba_pool_topk", "_mamba_verify_steps"],
        {"Optional": Optional, "get_spec": lambda: spec},
    )
    # sglang's own rule (pristine memory_pool.py): overlapping conv windows only for a chain.
    ns = _functions(sglang_0_5_17_tree / "sglang/srt/mem_cache/memory_pool.py", ["conv_window_dedup_enabled"], ns)
    args = _server_args(algorithm, 16, 64 if algorithm == "DDTREE" else 16)
    topk = ns["_mamba_pool_topk"](args)
    assert ns["conv_window_dedup_enabled"](False, False, topk, False) is (not dense_windows)
    assert ns["_mamba_verify_steps"](args) == steps
    # Every term of the mamba memory budget counts those steps (one assert left on the block size).
    text = (site / "sglang/srt/mem_cache/kv_cache_configurator.py").read_text()
    body = text[text.index("def _handle_max_mamba_cache") :]
    end = body.find("\n    def ", 10)  # the method may be the file's last
    body = body if end < 0 else body[:end]
    assert body.count("_mamba_verify_steps(server_args)") == 3
    assert body.count("get_spec().speculative_num_draft_tokens") == 1  # the `is not None` assert
    assert text.count("speculative_eagle_topk=_mamba_pool_topk(self.server_args)") == 2


def test_hybrid_backend_hands_ddtree_tree_links_to_the_linear_kernels(sglang_0_5_17_tree, tmp_path):
    site = _applied_0_5_17(sglang_0_5_17_tree, tmp_path)
    text = (site / "sglang/srt/layers/attention/hybrid_linear_attn_backend.py").read_text()
    meta = text[text.index("    def _forward_metadata") : text.index("    def init_forward_metadata_out_graph")]
    assert "if self.tree_verify:" in meta and "if self.topk > 1:" not in meta
    assert '== "DDTREE"' in text and "and not self.is_draft_worker" in text
    info = (site / "sglang/srt/speculative/dflash_info.py").read_text()
    assert "retrieve_next_token: Optional[torch.Tensor] = None" in info
    worker = (site / "sglang/srt/speculative/ddtree_worker.py").read_text()
    assert 'retrieve_next_token=tree["retrieve_next_token"]' in worker
    # sglang's own tree path that the links select (pristine): triton conv + GDN kernels with parents.
    gdn = (sglang_0_5_17_tree / "sglang/srt/layers/attention/linear/gdn_backend.py").read_text()
    assert "self.tree_verify_kernel = triton_kernel" in gdn
    assert 'if kwargs.get("retrieve_parent_token") is not None' in gdn
    conv = (sglang_0_5_17_tree / "sglang/kernels/ops/mamba/causal_conv1d_triton.py").read_text()
    assert "retrieve_parent_token_ptr" in conv


BACKEND_CASES = pytest.mark.parametrize(
    ("flags", "refused"),
    [
        ({"attention_backend": "triton"}, None),
        ({"attention_backend": "fa3"}, "'fa3', which does not read it"),
        ({"attention_backend": "flashinfer"}, None),
        ({"attention_backend": "triton", "decode_attention_backend": "fa4"}, "'fa4'"),
        ({"attention_backend": "flashinfer", "prefill_attention_backend": "trtllm_mha"}, "'trtllm_mha'"),
        ({"attention_backend": None}, "None: not set"),
        ({"attention_backend": "triton", "enable_linear_replayssm_spec": True}, "--enable-linear-replayssm-spec"),
        ({"attention_backend": "triton", "enable_linear_replayssm": True}, "--enable-linear-replayssm:"),
    ],
)


def _load_du(site):
    spec = importlib.util.spec_from_file_location("du_contract", site / "sglang/srt/speculative/ddtree_utils.py")
    du = importlib.util.module_from_spec(spec)
    sys.modules["du_contract"] = du  # dataclasses look their module up
    spec.loader.exec_module(du)
    return du


class _FakeModules:
    """Stand-ins in sys.modules for the duration of a block (restored after)."""

    def __init__(self, fake):
        self.fake, self.saved = fake, {}

    def __enter__(self):
        self.saved = {k: sys.modules.get(k) for k in self.fake}
        sys.modules.update(self.fake)
        return self

    def __exit__(self, *_exc):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


@BACKEND_CASES
def test_ddtree_refuses_backends_that_cannot_verify_its_tree(applied, flags, refused):
    version, tree, site = applied
    du = _load_du(site)
    # 0.5.17 keeps attention_backends_of in overrides.py, 0.5.23 in model_override_base.py.
    source = "overrides.py" if version == "0.5.17" else "model_override_base.py"
    overrides = _functions(tree / "sglang/srt/arg_groups" / source, ["attention_backends_of"], {"Any": object})
    fake = {
        "sglang.srt.arg_groups.overrides": types.SimpleNamespace(
            attention_backends_of=overrides["attention_backends_of"], resolved_view=lambda a: a
        ),
        "sglang.srt.speculative.ddtree_utils": du,
    }
    with _FakeModules(fake):
        ns = _functions(
            site / "sglang/srt/arg_groups/speculative_hook.py",
            ["_check_ddtree_backends"],
            {
                "ServerArgs": object,
                # 0.5.23's hook imports these at module level
                "attention_backends_of": overrides["attention_backends_of"],
                "resolved_view": lambda a: a,
                "resolving_view": lambda a: a,
            },
        )
        args = dict(
            prefill_attention_backend=None,
            decode_attention_backend=None,
            enable_linear_replayssm_spec=False,
            enable_linear_replayssm=False,
        )
        args.update(flags)
        server_args = types.SimpleNamespace(**args)
        if refused is None:
            ns["_check_ddtree_backends"](server_args)
        else:
            with pytest.raises(ValueError, match="DDTREE") as err:
                ns["_check_ddtree_backends"](server_args)
            assert refused in str(err.value)


# --- 0.5.23: the port's own decisions, on the patched real files ----------------------------------


@pytest.fixture
def site_0_5_23(sglang_source_tree, tmp_path):
    return _applied("0.5.23", sglang_source_tree, tmp_path)


def _cuda_graph_config(tree):
    """sglang 0.5.23's own cuda_graph_config.py (Backend, Phase, with_phase, CudaGraphConfig)."""
    fake = {"sglang.srt.runtime_context": types.SimpleNamespace(get_exec=lambda: None)}
    with _FakeModules(fake):
        spec = importlib.util.spec_from_file_location(
            "cgc_contract", tree / "sglang/srt/model_executor/cuda_graph_config.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["cgc_contract"] = module
        spec.loader.exec_module(module)
    return module


def _handle_ddtree_0_5_23(site, tree, monkeypatch, **fields):
    """Run the patched 0.5.23 `_handle_ddtree` on a config; returns (declared fields, error or None)."""
    du = _load_du(site)
    cgc = _cuda_graph_config(tree)
    overrides = _functions(
        tree / "sglang/srt/arg_groups/model_override_base.py", ["attention_backends_of"], {"Any": object}
    )
    cfg = dict(
        speculative_num_draft_tokens=4,
        tp_size=1,
        device="cuda",
        attn_dp=False,
        speculative_adaptive=False,
        attention_backend="triton",
        prefill_attention_backend=None,
        decode_attention_backend=None,
        enable_linear_replayssm_spec=False,
        enable_linear_replayssm=False,
        cuda_graph_config=cgc.CudaGraphConfig(
            decode=cgc.PhaseConfig(backend=cgc.Backend.FULL), prefill=cgc.PhaseConfig(backend=cgc.Backend.FULL)
        ),
    )
    cfg.update(fields)
    server_args = types.SimpleNamespace(**cfg)
    declared = []

    def declare_resolution(target, source, **values):
        assert target is server_args and source == "_handle_ddtree"
        declared.append(values)
        for key, value in values.items():
            setattr(server_args, key, value)

    namespace = {
        "ServerArgs": object,
        "_handle_dflash": lambda a: None,
        "resolving_view": lambda a: a,
        "resolved_view": lambda a: a,
        "attention_backends_of": overrides["attention_backends_of"],
        "attn_dp_enabled_of": lambda c: c.attn_dp,
        "declare_resolution": declare_resolution,
        "logger": types.SimpleNamespace(warning=lambda *a: None, info=lambda *a: None),
    }
    fake = {"sglang.srt.speculative.ddtree_utils": du, "sglang.srt.model_executor.cuda_graph_config": cgc}
    with _FakeModules(fake):
        ns = _functions(
            site / "sglang/srt/arg_groups/speculative_hook.py", ["_handle_ddtree", "_check_ddtree_backends"], namespace
        )
        try:
            ns["_handle_ddtree"](server_args)
        except ValueError as err:
            return declared, str(err), cgc
    return declared, None, cgc


def test_0_5_23_ddtree_launch_is_no_longer_refused_and_runs_its_tree_eagerly(
    site_0_5_23, sglang_source_tree, monkeypatch
):
    monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "16")
    declared, error, cgc = _handle_ddtree_0_5_23(site_0_5_23, sglang_source_tree, monkeypatch)
    assert error is None
    final = declared[-1]["cuda_graph_config"]
    # Both phases off, the decode phase kept off by the second declaration (built on the first).
    assert (final.decode.backend, final.prefill.backend) == (cgc.Backend.DISABLED, cgc.Backend.DISABLED)
    text = (site_0_5_23 / "sglang/srt/arg_groups/speculative_hook.py").read_text()
    assert "tree verification is not available on sglang 0.5.23" not in text


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (({"tp_size": 2}, {}), "tp_size == 1"),
        (({"device": "npu"}, {}), "CUDA devices only"),
        (({"attn_dp": True}, {}), "dp attention"),
        (({"speculative_adaptive": True}, {}), "--speculative-adaptive"),
        (({}, {"SGLANG_DDTREE_BUDGET": "3"}), "below the block size 4"),
        (({"attention_backend": "fa3"}, {}), "'fa3', which does not read it"),
        (({"enable_linear_replayssm_spec": True}, {}), "--enable-linear-replayssm-spec"),
        (({"speculative_num_draft_tokens": None}, {}), "needs the DFlash block size"),
    ],
)
def test_0_5_23_ddtree_launch_refuses_what_its_verify_step_does_not_handle(
    site_0_5_23, sglang_source_tree, monkeypatch, case, message
):
    fields, env = case
    monkeypatch.delenv("SGLANG_DDTREE_BUDGET", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _declared, error, _cgc = _handle_ddtree_0_5_23(site_0_5_23, sglang_source_tree, monkeypatch, **fields)
    assert error is not None and message in error


def _method(path, class_name, method_name):
    """The source of one method of a class, as a module-level function."""
    module = ast.parse(pathlib.Path(path).read_text())
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method_name)
    return fn


def test_0_5_23_every_verify_buffer_is_sized_for_the_tree(site_0_5_23, sglang_source_tree, monkeypatch):
    """max_speculative_num_draft_tokens() = N: KV headroom per decode, req_to_token rows, the snapshot pool."""
    du = _load_du(site_0_5_23)
    fn = _method(
        site_0_5_23 / "sglang/srt/speculative/spec_info.py",
        "SpeculativeAlgorithm",
        "resolve_max_speculative_num_draft_tokens",
    )
    namespace = {"ServerArgs": object, "Optional": Optional}
    fake = {
        "sglang.srt.arg_groups.overrides": types.SimpleNamespace(resolving_view=lambda a: a),
        "sglang.srt.speculative.ddtree_utils": du,
    }
    with _FakeModules(fake):
        exec(compile(ast.Module(body=[fn], type_ignores=[]), "spec_info.py", "exec"), namespace)
        resolve = namespace["resolve_max_speculative_num_draft_tokens"]
        args = types.SimpleNamespace(speculative_num_draft_tokens=16, speculative_adaptive=False)
        ddtree = types.SimpleNamespace(is_ddtree=lambda: True)
        dflash = types.SimpleNamespace(is_ddtree=lambda: False)
        monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "64")
        assert resolve(ddtree, args) == 64
        assert resolve(dflash, args) == 16
        monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "3")
        with pytest.raises(ValueError, match="below the block size"):
            resolve(ddtree, args)
    # The pristine consumers that read it (not the block B): the decode allocation and the row headroom.
    sizing = (sglang_source_tree / "sglang/srt/mem_cache/allocation_sizing.py").read_text()
    assert "spec_tokens = max_speculative_num_draft_tokens()" in sizing
    assert "extra = 4 + (max_speculative_num_draft_tokens() or 0)" in sizing
    # The per-step reservation of the DFlash draft input: 2 x max(B, N).
    info = (site_0_5_23 / "sglang/srt/speculative/dflash_info_v2.py").read_text()
    assert "block_size = max(block_size, resolve_ddtree_config(block_size).budget)" in info
    assert info.index("resolve_ddtree_config(block_size)") < info.index("reserve = 2 * block_size")


@pytest.mark.parametrize(("algorithm", "dense_windows", "steps"), [("DDTREE", True, 64), ("DFLASH", False, 16)])
def test_0_5_23_hybrid_pool_keeps_a_dense_window_and_a_snapshot_per_tree_node(
    site_0_5_23, sglang_source_tree, algorithm, dense_windows, steps
):
    spec = types.SimpleNamespace(
        speculative_algorithm=algorithm, speculative_eagle_topk=1, speculative_num_draft_tokens=16
    )
    ns = _functions(
        site_0_5_23 / "sglang/srt/mem_cache/kv_cache_configurator.py",
        ["_is_ddtree", "_mamba_pool_topk", "_mamba_verify_steps"],
        {
            "Optional": Optional,
            "get_spec": lambda: spec,
            "max_speculative_num_draft_tokens": lambda: 64 if algorithm == "DDTREE" else 16,
        },
    )
    ns = _functions(sglang_source_tree / "sglang/srt/mem_cache/memory_pool.py", ["conv_window_dedup_enabled"], ns)
    assert ns["conv_window_dedup_enabled"](False, False, ns["_mamba_pool_topk"](), False) is (not dense_windows)
    assert ns["_mamba_verify_steps"]() == steps
    text = (site_0_5_23 / "sglang/srt/mem_cache/kv_cache_configurator.py").read_text()
    body = text[text.index("    def _handle_max_mamba_cache") :]
    end = body.find("\n    def ", 10)
    body = body if end < 0 else body[:end]
    # Every term of the mamba memory budget counts the tree's snapshots (one assert left on B).
    assert body.count("_mamba_verify_steps()") == 3
    assert body.count("get_spec().speculative_num_draft_tokens") == 1
    # Both target pools (static and unified builders) keep the tree's dense windows.
    assert text.count("speculative_eagle_topk=_mamba_pool_topk(),") == 2


def test_0_5_23_hybrid_backend_hands_ddtree_tree_links_to_the_linear_kernels(site_0_5_23, sglang_source_tree):
    text = (site_0_5_23 / "sglang/srt/layers/attention/hybrid_linear_attn_backend.py").read_text()
    meta = text[text.index("    def _forward_metadata") : text.index("    def init_forward_metadata_out_graph")]
    assert "if self.tree_verify:" in meta and "if self.topk > 1:" not in meta
    assert '(get_spec().speculative_algorithm or "").upper() == "DDTREE"' in text
    assert "and not self.is_draft_worker" in text
    info = (site_0_5_23 / "sglang/srt/speculative/dflash_info.py").read_text()
    assert "retrieve_next_token: Optional[torch.Tensor] = None" in info
    worker = (site_0_5_23 / "sglang/srt/speculative/ddtree_worker.py").read_text()
    assert 'retrieve_next_token=tree["retrieve_next_token"]' in worker
    assert "ddtree_utils.check_kernel_parents(tree.parents)" in worker
    assert "ddtree_utils.commit_nodes(rows, drafts, budget)" in worker
    # sglang 0.5.23's own tree path that the links select (pristine): the GDN dispatcher sends a verify
    # with parent links to the triton kernel, the conv kernel follows them.
    gdn = (sglang_source_tree / "sglang/srt/layers/attention/linear/gdn_backend.py").read_text()
    assert "self.tree_verify_kernel = triton_kernel" in gdn
    pick = gdn[gdn.index("def _get_target_verify_kernel") :][:400]
    assert "self.tree_verify_kernel" in pick and "if retrieve_parent_token is not None" in pick
    conv = (sglang_source_tree / "sglang/kernels/ops/mamba/causal_conv1d_triton.py").read_text()
    assert "retrieve_parent_token_ptr" in conv
    backend = (sglang_source_tree / "sglang/srt/layers/attention/hybrid_linear_attn_backend.py").read_text()
    assert "retrieve_parent_token = torch.empty_like(retrieve_next_token)" in backend


# --- 0.5.23: the verify step against the real signatures it calls -------------------------------


def _defs(path):
    """name -> FunctionDef of every function and method in a file (methods also as Class.name)."""
    out = {}
    for node in ast.walk(ast.parse(pathlib.Path(path).read_text())):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[node.name + "." + item.name] = item
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, node)
    return out


def _params(fn):
    a = fn.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    return names, a.kwarg is not None


def _dataclass_fields(path, class_name):
    module = ast.parse(pathlib.Path(path).read_text())
    cls = next(n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name == class_name)
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def _keyword_calls(path, callee):
    """Every call of ``callee`` (a name or an attribute) in a file, as sets of keyword names."""
    calls = []
    for node in ast.walk(ast.parse(pathlib.Path(path).read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name == callee:
                calls.append({k.arg for k in node.keywords if k.arg is not None})
    return calls


class _Patched:
    """A path under sglang/ in the patched copy when the set touches the file, else in the pristine tree."""

    def __init__(self, site, tree, rel="sglang"):
        self.site, self.tree, self.rel = site, tree, rel

    def __truediv__(self, part):
        return _Patched(self.site, self.tree, self.rel + "/" + part)

    def __fspath__(self):
        patched = self.site / self.rel
        return str(patched if patched.is_file() else self.tree / self.rel)

    @property
    def name(self):
        return pathlib.Path(self.rel).name

    def read_text(self):
        return pathlib.Path(self).read_text()


def test_0_5_23_verify_step_calls_sglang_0_5_23_with_keywords_it_takes(site_0_5_23, sglang_source_tree):
    """Every keyword the 0.5.23 verify step passes names a parameter (or field) of what it calls there."""
    tree_root = _Patched(site_0_5_23, sglang_source_tree)
    srt = tree_root / "srt"
    worker_py = srt / "speculative/ddtree_worker.py"
    calls = {
        # callee in the step: (file of its definition, qualified name)
        "assign_extend_cache_locs_func": (
            tree_root / "kernels/ops/speculative/cache_locs.py",
            "assign_extend_cache_locs_func",
        ),
        "verify_tree_greedy_func": (tree_root / "kernels/ops/speculative/spec_tree.py", "verify_tree_greedy_func"),
        "plan": (srt / "mem_cache/kv_index_translator.py", "KVIndexTranslator.plan"),
        "write_ids": (srt / "mem_cache/kv_loc_plan.py", "KVLocPlan.write_ids"),
        "prepare_for_verify": (srt / "speculative/dflash_info.py", "DFlashVerifyInput.prepare_for_verify"),
        "apply_dflash_verify_logits_adjustments": (
            srt / "speculative/dflash_utils.py",
            "apply_dflash_verify_logits_adjustments",
        ),
        "update_mamba_state_after_mtp_verify": (
            srt / "layers/attention/hybrid_linear_attn_backend.py",
            "HybridLinearAttnBackend.update_mamba_state_after_mtp_verify",
        ),
        "_append_target_hidden_to_draft_kv_by_loc": (
            srt / "speculative/dflash_worker_v2.py",
            "DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc",
        ),
        "_make_next_draft_input_decode": (
            srt / "speculative/dflash_worker_v2.py",
            "DFlashWorkerV2._make_next_draft_input_decode",
        ),
        "_draft_write_ids": (srt / "speculative/dflash_worker_v2.py", "DFlashWorkerV2._draft_write_ids"),
        "_can_skip_verify_logits": (srt / "speculative/dflash_worker_v2.py", "DFlashWorkerV2._can_skip_verify_logits"),
        "move_kv_cache": (srt / "mem_cache/memory_pool.py", "MHATokenToKVPool.move_kv_cache"),
        "forward_batch_generation": (srt / "managers/tp_worker.py", "TpModelWorker.forward_batch_generation"),
        "mamba_track_grid": (srt / "runtime_context.py", "mamba_track_grid"),
        "draft_tp_context": (srt / "speculative/spec_utils.py", "draft_tp_context"),
        # a batch with sampling: sgl_kernel's tree sampling (dflash_utils re-exports it) and its probabilities
        "tree_speculative_sampling_target_only": (
            tree_root / "kernels/ops/speculative/sampling.py",
            "tree_speculative_sampling_target_only",
        ),
        "build_speculative_verify_target_probs": (
            srt / "speculative/dflash_utils.py",
            "build_speculative_verify_target_probs",
        ),
    }
    checked = 0
    for callee, (path, qualified) in calls.items():
        defs = _defs(path)
        assert qualified in defs, f"sglang 0.5.23 has no {qualified} in {path.name}"
        names, has_kwargs = _params(defs[qualified])
        uses = _keyword_calls(worker_py, callee)
        assert uses, f"the step no longer calls {callee}"
        for keywords in uses:
            unknown = keywords - names
            assert has_kwargs or not unknown, f"{callee}({', '.join(sorted(unknown))}=...) not in {qualified}"
            checked += len(keywords)
    assert checked >= 30  # keywords checked (39 when written)
    # Dataclasses: DFlashVerifyInput (patched: the links) and GenerationBatchResult.
    fields = _dataclass_fields(srt / "speculative/dflash_info.py", "DFlashVerifyInput")
    for keywords in _keyword_calls(worker_py, "DFlashVerifyInput"):
        assert keywords <= fields, keywords - fields
    fields = _dataclass_fields(srt / "managers/utils.py", "GenerationBatchResult")
    for keywords in _keyword_calls(worker_py, "GenerationBatchResult"):
        assert keywords <= fields, keywords - fields
    # The deferred-logits API the step uses is 0.5.23's LogitsProcessor's.
    lp = _defs(srt / "layers/logits_processor.py")
    for method in ("is_deferred_shard", "deferred_argmax", "finish_deferred_gather"):
        assert "LogitsProcessor." + method in lp
    # The worker attributes the step reads exist on the patched DFlashWorkerV2.
    worker_v2 = (srt / "speculative/dflash_worker_v2.py").read_text()
    for attribute in (
        "self._target_logits_processor =",
        "self.draft_parallel_layout =",
        "self._need_mamba_verify_commit =",
        "self.block_size =",
        "self._ddtree_config =",
    ):
        assert attribute in worker_v2, attribute


def test_0_5_23_worker_hands_greedy_batches_to_the_tree_step_right_after_the_draft(site_0_5_23):
    path = site_0_5_23 / "sglang/srt/speculative/dflash_worker_v2.py"
    text = path.read_text()
    step = _defs(site_0_5_23 / "sglang/srt/speculative/ddtree_worker.py")["ddtree_verify_step"]
    names, _ = _params(step)
    (passed,) = _keyword_calls(path, "ddtree_verify_step")
    assert passed == names - {"worker"}
    forward = text[text.index("    def forward_batch_generation") :]
    draft = forward.index("draft_out = self.draft_model_runner.forward(forward_batch)")
    handoff = forward.index("return ddtree_verify_step(")
    # After the draft forward, before any DFlash head (Domino, sampler graph, selector, LiLiCorr, greedy).
    assert draft < handoff < forward.index("self._is_domino")
    assert handoff < forward.index("# --- 2) Target verify.")
    # The draft block's forward batch carries the configured algorithm, not a DFLASH literal.
    assert "spec_algorithm=SpeculativeAlgorithm.DFLASH," not in text
    assert "spec_algorithm=self._spec_algorithm," in text
    init = text[text.index("    def init_attention_backends") : text.index("    def init_cuda_graphs")]
    assert "check_ddtree_target(self)" in init


def _worker_functions(site, names, **namespace):
    du = _load_du(site)
    base = {
        "ddtree_utils": du,
        "Optional": Optional,
        "logger": types.SimpleNamespace(info=lambda *a: None, warning=lambda *a: None),
        "mambaish_config": lambda mc: mc.hf_config if mc.hf_config.kind != "dense" else None,
        "hybrid_gdn_config": lambda mc: mc.hf_config if mc.hf_config.kind == "gdn" else None,
    }
    base.update(namespace)
    return _functions(site / "sglang/srt/speculative/ddtree_worker.py", names, base)


@pytest.mark.parametrize(
    ("batch", "simulate", "sampling_kernel", "tree"),
    [
        ({}, 0.0, True, True),
        # sampling: the tree with sgl_kernel's tree sampling, the chain without it
        ({"sampling_info": types.SimpleNamespace(is_all_greedy=False)}, 0.0, True, True),
        ({"sampling_info": types.SimpleNamespace(is_all_greedy=False)}, 0.0, False, False),
        ({"has_grammar": True}, 0.0, True, False),
        ({"return_logprob": True}, 0.0, True, False),
        ({}, 2.5, True, False),
    ],
)
def test_0_5_23_greedy_and_sampling_batches_are_verified_as_a_tree(site_0_5_23, batch, simulate, sampling_kernel, tree):
    available = types.SimpleNamespace(is_dflash_sampling_verify_available=lambda: sampling_kernel)
    ns = _worker_functions(site_0_5_23, ["ddtree_can_verify"], dflash_utils=available)
    fields = dict(has_grammar=False, return_logprob=False, sampling_info=types.SimpleNamespace(is_all_greedy=True))
    fields.update(batch)
    assert ns["ddtree_can_verify"](types.SimpleNamespace(**fields), simulate) is tree


def _target_worker(kind, translating=False, commit=True):
    runner = types.SimpleNamespace(
        model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(kind=kind)),
        kv_index_translator=types.SimpleNamespace(is_translating=translating),
    )
    return types.SimpleNamespace(
        target_worker=types.SimpleNamespace(model_runner=runner), _need_mamba_verify_commit=commit
    )


@pytest.mark.parametrize(
    ("kind", "translating", "commit", "refused"),
    [
        ("dense", False, False, None),
        ("gdn", False, True, None),
        ("mamba2", False, True, "have no tree verify"),
        ("gdn", False, False, "have no tree verify"),  # a hybrid backend without the commit hook
        ("dense", True, False, "translated KV pool"),
    ],
)
def test_0_5_23_start_up_refuses_targets_the_step_cannot_verify(site_0_5_23, kind, translating, commit, refused):
    ns = _worker_functions(site_0_5_23, ["check_ddtree_target"])
    worker = _target_worker(kind, translating, commit)
    if refused is None:
        ns["check_ddtree_target"](worker)
        assert worker._ddtree_target_checked is True
    else:
        with pytest.raises(RuntimeError, match="DDTREE") as err:
            ns["check_ddtree_target"](worker)
        assert refused in str(err.value)


@pytest.mark.parametrize(
    ("draft", "refused"),
    [
        ({}, None),
        ({"_is_domino": True}, "a Domino draft"),
        ({"selector": object()}, "a candidate-selector draft"),
        ({"lilicorr": object()}, "a LiLiCorr draft head"),
    ],
)
def test_0_5_23_the_tree_is_built_from_the_plain_dflash_draft_only(site_0_5_23, monkeypatch, draft, refused):
    monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "16")
    ns = _worker_functions(site_0_5_23, ["init_ddtree"])
    worker = types.SimpleNamespace(block_size=4, _is_domino=False, selector=None, lilicorr=None)
    for key, value in draft.items():
        setattr(worker, key, value)
    assert ns["init_ddtree"](worker, types.SimpleNamespace(speculative_algorithm="DFLASH")) is None
    ddtree = types.SimpleNamespace(speculative_algorithm="DDTREE")
    if refused is None:
        config = ns["init_ddtree"](worker, ddtree)
        assert (config.block_size, config.budget) == (4, 16) and worker._ddtree_steps == 0
    else:
        with pytest.raises(ValueError, match=refused):
            ns["init_ddtree"](worker, ddtree)
