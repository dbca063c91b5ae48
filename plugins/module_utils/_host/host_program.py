# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The source of a host program: a module_utils file that also runs as ``python -c SOURCE``.

Programs that run on a host in another interpreter (a release venv's python) are ordinary,
linted, unit-tested modules under module_utils. The Ansible module imports them, so AnsiballZ
packs them into its payload with the other module_utils; at run time their text is read back
through the module's loader (the zip importer inside the payload, a file loader in a checkout).
"""

from __future__ import annotations


class HostProgramError(RuntimeError):
    """The source of a host program could not be read."""


def source_of(module) -> str:
    """The Python source of an imported module, wherever it was imported from."""
    loader = getattr(module, "__loader__", None)
    source = None
    if loader is not None and hasattr(loader, "get_source"):
        source = loader.get_source(module.__name__)
    if source is None and getattr(module, "__file__", None) and module.__file__.endswith(".py"):
        with open(module.__file__, encoding="utf-8") as handle:
            source = handle.read()
    if not source:
        raise HostProgramError(f"no source for host program {module.__name__}")
    return source
