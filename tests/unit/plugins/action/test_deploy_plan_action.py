"""The deploy_plan action's controller reads: an index's PEP 658 metadata, the repository's data files."""

import functools
import http.server
import threading
import urllib.request

import pytest
from ansible_collections.specdec.sglang.plugins.action import deploy_plan as action
from support.build_stub_wheels import build_all
from support.simple_index import build


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """The lab's index layout (tests/support/simple_index.py) over the stub wheels, served on loopback."""
    wheels = tmp_path_factory.mktemp("wheels")
    build_all(wheels)
    root = tmp_path_factory.mktemp("index")
    build(root, sorted(wheels.glob("*.whl")))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


def opener(url, timeout):
    return urllib.request.urlopen(url, timeout=timeout)


def test_the_metadata_of_the_pinned_version_is_read_from_the_index(index):
    text, where = action.fetch_index_metadata(index, "sglang_kernel", "0.4.5", opener=opener)
    assert "Name: sglang-kernel\nVersion: 0.4.5\n" in text
    assert where.endswith("/files/sglang_kernel-0.4.5-py3-none-any.whl.metadata")
    torch, _where = action.fetch_index_metadata(index, "torch", "2.11.0", opener=opener)
    assert 'Requires-Dist: triton==3.6.0; platform_system == "Linux"' in torch


def test_a_version_the_index_lacks_or_an_unreachable_index_gives_none(index):
    assert action.fetch_index_metadata(index, "torch", "2.14.1", opener=opener) is None
    assert action.fetch_index_metadata("http://127.0.0.1:9/simple", "torch", "2.11.0", opener=opener) is None


def test_the_repositorys_patch_sets_and_known_runtimes_load():
    names = [r["name"] for r in action.available_patch_sets(action.os.path.join(action.COLLECTION, "patchsets"))]
    assert "ddtree-0.5.17" in names and "ddtree-0.5.23" in names
    assert set(action.load_known_runtimes()["runtimes"]) >= {"0.5.17", "0.5.23"}
