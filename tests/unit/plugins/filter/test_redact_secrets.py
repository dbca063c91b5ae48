"""The filter specdec.sglang.redact_secrets: module_utils redaction as a Jinja filter, errors as filter errors."""

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.specdec.sglang.plugins.filter.redact_secrets import FilterModule


def test_the_filter_redacts_yaml_and_env_text():
    redact_secrets = FilterModule().filters()["redact_secrets"]
    assert yaml.safe_load(redact_secrets('api-key: "sk-1"\n')) == {"api-key": "<redacted>"}
    assert 'HF_TOKEN="<redacted>"' in redact_secrets("HF_TOKEN=hf_1\n", "env").splitlines()


def test_an_unknown_format_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="redact_secrets: unknown format 'ini'"):
        FilterModule().filters()["redact_secrets"]("a=1", "ini")
