"""sglang-engine-simulator: a TEST DOUBLE for the SGLang server (lab and CI only, never production).

It accepts a subset of sglang 0.5.23's launch flags, answers sglang's HTTP endpoints with sglang's
shapes and timings (scaled down), and reproduces sglang's start-up and serving failures on request
(`SGLANG_SIM_FAULT`). See README.md next to pyproject.toml.
"""

__version__ = "0.1.0"
# What /server_info reports as `version`: the sglang version imitated, marked as simulated.
SIMULATED_SGLANG_VERSION = "0.5.23-sim"
