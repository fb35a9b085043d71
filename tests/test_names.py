"""core.names.short_spec: column heads and counterexample file names that stay short and tell kernels apart."""

from __future__ import annotations

import pytest

from core.names import short_spec


@pytest.mark.parametrize(("spec", "short"), [
    ("/home/me/projects/flaggems/wrap.py:layer_norm", "flaggems/wrap:layer_norm"),
    ("wrap.py:layer_norm", "wrap:layer_norm"),
    ("transformers.models.llama.modeling_llama:LlamaRMSNorm", "modeling_llama:LlamaRMSNorm"),
    ("torch-module:layernorm", "torch-module:layernorm"),
    ("flaggems-layernorm", "flaggems-layernorm"),
    ("my-gemma", "my-gemma"),
])
def test_short_spec(spec, short):
    assert short_spec(spec) == short
