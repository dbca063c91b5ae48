"""Patch sets: manifests, the unified diff applier, the verify program run in the release venv."""
