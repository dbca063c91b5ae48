# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Contract: the DDTree patch sets against the real sglang wheels they were made for.

ddtree-0.5.17 needs the 0.5.17 tree, ddtree-0.5.23 the 0.5.23 tree (the tier's `sglang_tree`
fixture fetches either). Each set: base checksums and diffs against the wheel, apply into a copy of the
touched files, compile-mode verify (every define in the patched syntax trees), revert byte-identical.
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
from ansible_collections.specdec.sglang.plugins.module_utils import patchset as ps

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
    assert ("sglang/srt/speculative/ddtree_worker.py" in created) == (version == "0.5.17")


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


def _applied_0_5_17(tree, tmp_path):
    set_dir = REPO / "patchsets" / "ddtree-0.5.17"
    manifest = yaml.safe_load((set_dir / "patchset.yml").read_text())
    site = _site(tmp_path, tree, manifest)
    ps.apply(str(set_dir), str(site), str(tmp_path / "b"), manifest, PY)
    return site


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


@pytest.mark.parametrize(
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
def test_ddtree_refuses_backends_that_cannot_verify_its_tree(sglang_0_5_17_tree, tmp_path, flags, refused):
    site = _applied_0_5_17(sglang_0_5_17_tree, tmp_path)
    spec = importlib.util.spec_from_file_location("du_contract", site / "sglang/srt/speculative/ddtree_utils.py")
    du = importlib.util.module_from_spec(spec)
    sys.modules["du_contract"] = du  # dataclasses look their module up
    spec.loader.exec_module(du)
    overrides = _functions(
        sglang_0_5_17_tree / "sglang/srt/arg_groups/overrides.py", ["attention_backends_of"], {"Any": object}
    )
    fake = {
        "sglang.srt.arg_groups.overrides": types.SimpleNamespace(
            attention_backends_of=overrides["attention_backends_of"], resolved_view=lambda a: a
        ),
        "sglang.srt.speculative.ddtree_utils": du,
    }
    saved = {k: sys.modules.get(k) for k in fake}
    sys.modules.update(fake)
    try:
        ns = _functions(
            site / "sglang/srt/arg_groups/speculative_hook.py", ["_check_ddtree_backends"], {"ServerArgs": object}
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
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
