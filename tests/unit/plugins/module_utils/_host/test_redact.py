"""Support bundle redaction: keys kept, secret values replaced, the output parses back; nothing unparsed leaks."""

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._host.redact import (
    REDACTED,
    RedactError,
    is_secret,
    redact,
    redact_env,
    redact_yaml,
    scrub,
    secret_values,
)

SECRET = "sk-s3cret-value"
# The --config file the role renders (templates/sglang.yaml.j2) with an API key.
ROLE_CONFIG = (
    "#\n# Ansible managed\n#\n"
    "# --config file of sglang.service (sglang reads it at start, 0.5.3 and later)\n"
    f'api-key: "{SECRET}"\n'
)
# What the regex of diagnose.yml before this change wrote for ROLE_CONFIG (measured with ansible-core 2.19.14).
OLD_OUTPUT = ROLE_CONFIG.replace(f'api-key: "{SECRET}"', "\\1: <redacted>")


def check_redacted_yaml(original: str, redacted: str, secret_paths):
    """What a redacted YAML file must be: valid YAML, the same keys, secrets replaced, other values unchanged."""
    before, after = yaml.safe_load(original), yaml.safe_load(redacted)

    def keys(node, path=()):
        if isinstance(node, dict):
            return {(*path, k) for k in node} | {p for k, v in node.items() for p in keys(v, (*path, k))}
        if isinstance(node, list):
            return {p for i, v in enumerate(node) for p in keys(v, (*path, i))}
        return set()

    def at(node, path):
        for part in path:
            node = node[part]
        return node

    assert keys(after) == keys(before), "the key names and nesting must be kept"
    for path in keys(before):
        value = at(after, path)
        if path in secret_paths:
            assert value == REDACTED, path
        elif not isinstance(value, (dict, list)) and not any(path[: len(s)] == s for s in secret_paths):
            assert value == at(before, path), path


def test_role_config_keeps_the_api_key_name_and_parses_back():
    out = redact_yaml(ROLE_CONFIG)
    assert SECRET not in out
    assert yaml.safe_load(out) == {"api-key": REDACTED}
    check_redacted_yaml(ROLE_CONFIG, out, {("api-key",)})


def test_the_old_regex_output_fails_the_same_check():
    """The check above is what the old output failed: the key line became '\\1: <redacted>'."""
    with pytest.raises(AssertionError, match="key names and nesting must be kept"):
        check_redacted_yaml(ROLE_CONFIG, OLD_OUTPUT, {("api-key",)})


def test_nested_and_listed_secrets_are_redacted_with_structure_kept():
    text = f"""
model-path: /models/qwen
max-total-tokens: 4096
tokenizer-path: /models/tok
hf_token: hf_{SECRET}
nested:
  apiKey: {SECRET}
  port: 30000
  credentials:
    user: alice
    password: {SECRET}
backends:
  - name: a
    api_key: {SECRET}
env:
  - name: HF_TOKEN
    value: {SECRET}
  - name: HOME
    value: /home/sglang
empty_token: ""
unset_key: null
"""
    out = redact_yaml(text)
    assert SECRET not in out
    secrets = {
        ("hf_token",),
        ("nested", "apiKey"),
        ("nested", "credentials", "user"),
        ("nested", "credentials", "password"),
        ("backends", 0, "api_key"),
        ("env", 0, "value"),
    }
    check_redacted_yaml(text, out, secrets)
    loaded = yaml.safe_load(out)
    assert loaded["max-total-tokens"] == 4096 and loaded["tokenizer-path"] == "/models/tok"
    assert loaded["env"][1] == {"name": "HOME", "value": "/home/sglang"}
    assert loaded["empty_token"] == "" and loaded["unset_key"] is None


def test_key_order_is_kept():
    out = redact_yaml("zeta: 1\napi_key: x\nalpha: 2\n")
    assert list(yaml.safe_load(out)) == ["zeta", "api_key", "alpha"]


def test_role_config_without_a_key_stays_an_empty_mapping():
    out = redact_yaml("# Ansible managed\n{}\n")
    assert yaml.safe_load(out) == {}


def test_comment_only_file_parses_back_as_empty():
    assert yaml.safe_load(redact_yaml("# nothing here\n")) is None


def test_invalid_yaml_is_withheld_without_quoting_it():
    text = f"api-key: {SECRET}\n  bad: [unclosed\n"
    out = redact_yaml(text)
    assert SECRET not in out and "bad" not in out
    assert "withheld: the file is not valid YAML at line" in out
    assert yaml.safe_load(out) is None


def test_several_documents_each_redacted():
    out = redact_yaml(f"a: 1\n---\ntoken: {SECRET}\n")
    assert SECRET not in out
    assert list(yaml.safe_load_all(out)) == [{"a": 1}, {"token": REDACTED}]


@pytest.mark.parametrize(
    "name",
    ["api_key", "api-key", "apiKey", "API_KEY", "SGLANG_API_KEY", "hf_token", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
     "hftoken", "AWS_SECRET_ACCESS_KEY", "client_secret", "db_password", "PASSWD", "credentials", "private_key",
     "admin-api-key"],
)  # fmt: skip
def test_secret_names(name):
    assert is_secret(name)


@pytest.mark.parametrize(
    "name",
    ["model-path", "max_total_tokens", "max-prefill-tokens", "tokenizer_path", "skip_tokenizer_init", "HOME",
     "CUDA_VISIBLE_DEVICES", "speculative_num_draft_tokens", "port", "keys_count", "KeyError", "key_path",
     "TokenizerError"],
)  # fmt: skip
def test_names_that_are_not_secret(name):
    assert not is_secret(name)


def test_env_file_keeps_names_and_non_secret_lines():
    text = (
        "# EnvironmentFile of sglang.service\n"
        'HOME="/home/sglang"\n'
        f'HF_TOKEN="{SECRET}"\n'
        f"export MY_API_KEY={SECRET}\n"
        'EMPTY_TOKEN=""\n'
        "MAX_TOKENS=4\n"
    )
    out = redact_env(text)
    assert SECRET not in out
    lines = out.splitlines()
    assert 'HOME="/home/sglang"' in lines
    assert f'HF_TOKEN="{REDACTED}"' in lines
    assert f'export MY_API_KEY="{REDACTED}"' in lines
    assert 'EMPTY_TOKEN=""' in lines
    assert "MAX_TOKENS=4" in lines


def test_env_secret_continued_on_next_lines_is_dropped_whole():
    text = f'HF_TOKEN="{SECRET[:4]}\n{SECRET[4:]}"\nAPI_KEY={SECRET[:5]}\\\n{SECRET[5:]}\nHOME=/h\n'
    out = redact_env(text)
    assert SECRET[4:] not in out and SECRET[5:] not in out
    assert out.splitlines()[1:] == [f'HF_TOKEN="{REDACTED}"', f'API_KEY="{REDACTED}"', "HOME=/h"]


def test_env_line_that_is_not_an_assignment_is_withheld():
    out = redact_env(f"HOME=/h\n{SECRET}\n")
    assert SECRET not in out
    assert "# withheld: a line that is not NAME=value" in out


def test_unknown_format_is_refused():
    with pytest.raises(RedactError, match="allowed: yaml, env"):
        redact("a: 1", "json")


# --- logs and command output (scrub, secret_values) --------------------------------------------------------------
# What sglang writes to the journal at start (0.5.17: the dataclass repr; 0.5.23: the resolved dict), shortened.
JOURNAL_0_5_17 = (
    "Dec 02 00:41:07 ct129 sglang[812]: [2026-12-02 00:41:07] server_args=ServerArgs(model_path='/models/q',"
    f" tokenizer_path='/models/q', api_key='{SECRET}', admin_api_key=None, max_total_tokens=None)\n"
)
JOURNAL_0_5_23 = (
    "Dec 02 00:41:07 ct129 sglang[812]: server_args={'model_path': '/models/q', "
    f"'api_key': '{SECRET}', 'admin_api_key': None, 'max_prefill_tokens': 16384}}\n"
)


@pytest.mark.parametrize("line", [JOURNAL_0_5_17, JOURNAL_0_5_23])
def test_scrub_redacts_the_key_in_sglangs_server_args_line(line):
    out, count = scrub(line)
    assert SECRET not in out and count == 1
    assert "admin_api_key" in out and "/models/q" in out and "None" in out


@pytest.mark.parametrize(
    ("text", "kept"),
    [(f"ExecStart=/v/bin/python -m sglang.launch_server --api-key {SECRET} --port 30000", "--port 30000"),
     (f"launch_command: python -m sglang.launch_server --api-key={SECRET} --tp 1", "--tp 1"),
     (f'api-key: "{SECRET}"', "api-key: "),
     (f"HF_TOKEN={SECRET}\nHOME=/h", "HOME=/h"),
     (f"a=api_key={SECRET} --hf-token --port 1", "--hf-token --port 1")],
)  # fmt: skip
def test_scrub_forms(text, kept):
    out, count = scrub(text)
    assert SECRET not in out and count == 1 and kept in out and REDACTED in out


def test_scrub_keeps_what_is_not_secret():
    text = "max_total_tokens=4096 tokenizer_path='/t' --max-prefill-tokens 8 api_key=None admin_api_key='' token=null"
    assert scrub(text) == (text, 0)


def test_known_values_are_redacted_wherever_they_appear():
    values = secret_values(ROLE_CONFIG + 'HOME="/h"\nHF_TOKEN="hf_abc123"\n')
    assert values == {SECRET, "hf_abc123"}
    out, count = scrub(f"Traceback: 401 for key {SECRET} ... hf_abc123 expired\n", values)
    assert out == f"Traceback: 401 for key {REDACTED} ... {REDACTED} expired\n" and count == 2


def test_secret_values_unquote_json_escapes():
    assert secret_values('api-key: "a\\"b\\\\c"\n') == {'a"b\\c'}


def test_a_traceback_keeps_its_exception_line():
    """The diagnose bundle's journal must keep the exception an operator reads (the awx workflow failed on it)."""
    line = "KeyError: 'model.layers.0.linear_attn.dt_bias' (architecture Qwen3ForCausalLM)"
    text = f"Traceback (most recent call last):\n  File x\n{line}\nserver_args=ServerArgs(api_key='{SECRET}')\n"
    out, count = scrub(text)
    assert line in out
    assert SECRET not in out
    assert count == 1
