"""A model whose own forward fails under the meta-device trace is one error naming where, not a traceback."""

from __future__ import annotations

import pytest

from graphsim.errors import UnsupportedArchitectureError
from graphsim.importers.hf import _trace_failure


def _raise_in(filename: str) -> Exception:
    code = compile("attention_mask = None\nattention_mask[:, 0]\n", filename, "exec")
    try:
        exec(code, {})
    except TypeError as e:
        return e
    raise AssertionError("the snippet must raise")


def test_the_message_names_the_model_file_and_line():
    error = _raise_in("/site-packages/transformers/models/deepseek_v32/modeling_deepseek_v32.py")
    message = _trace_failure("DeepseekV32ForCausalLM", error)
    assert message.startswith("graphsim cannot trace DeepseekV32ForCausalLM yet")
    assert "deepseek_v32/modeling_deepseek_v32.py line 2" in message
    assert "TypeError: 'NoneType' object is not subscriptable" in message and "\n" not in message


def test_import_turns_a_forward_failure_into_that_error(monkeypatch):
    import graphsim.importers.hf.trace as trace_mod

    def failing(model):
        raise _raise_in("/x/transformers/models/llama/modeling_llama.py")

    monkeypatch.setattr(trace_mod, "trace", failing)
    from graphsim.importers.hf import import_hf

    with pytest.raises(UnsupportedArchitectureError, match=r"cannot trace LlamaForCausalLM yet.*llama/modeling_llama.py"):
        import_hf("llama-3.1-8b", cache=False)
