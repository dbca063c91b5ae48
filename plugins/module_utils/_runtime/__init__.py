"""The runtime: manifest, requirements, venv probes, coherence with a reference venv, uv."""
