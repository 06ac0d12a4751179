"""Speculative decoding: vLLM's --speculative-config, the acceptance arithmetic, and the scheduler's spec steps
(on a stand-in cost, no trace)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from graphsim.catalog import resolve_model
from graphsim.serving.metrics import summarize
from graphsim.serving.requests import RequestSpec
from graphsim.serving.simulator import simulate
from graphsim.serving.speculative import (
    Acceptance, SpecSimulation, SpeculativeError, mtp_layers, parse_acceptance, parse_speculative_config,
)
from tests.serving.serving_helpers import AffineCost, small_setup


# --- acceptance -----------------------------------------------------------------------------------------------
def test_expected_tokens_k3_hand_derived():
    # a = [0.9, 0.8, 0.5]: P(≥1) = 0.9, P(≥2) = 0.9·0.8 = 0.72, P(≥3) = 0.72·0.5 = 0.36;
    # accepted = 0.9 + 0.72 + 0.36 = 1.98; tokens a step = 1 + 1.98 = 2.98
    acc = parse_acceptance("0.9,0.8,0.5", 3)
    assert acc.expected_accepted() == pytest.approx(1.98)
    assert acc.expected_tokens() == pytest.approx(2.98)
    # P(a = 0) = 0.1, P(1) = 0.9 − 0.72 = 0.18, P(2) = 0.72 − 0.36 = 0.36, P(3) = 0.36
    assert acc.distribution() == pytest.approx([0.1, 0.18, 0.36, 0.36])


def test_rate_is_every_position():
    # p = 0.5, k = 3: 0.5 + 0.25 + 0.125 = 0.875 accepted, 1.875 tokens
    acc = parse_acceptance("0.5", 3)
    assert acc.rates == (0.5, 0.5, 0.5)
    assert acc.expected_tokens() == pytest.approx(1.875)
    assert parse_acceptance("[1, 1]", 2).expected_tokens() == 3.0
    assert parse_acceptance("0", 4).expected_tokens() == 1.0


def test_sampling_is_seeded_and_matches_the_distribution():
    acc = Acceptance((0.9, 0.8, 0.5))
    a = acc.sample(np.random.default_rng(7), 200_000)
    b = acc.sample(np.random.default_rng(7), 200_000)
    assert (a == b).all() and a.min() >= 0 and a.max() <= 3
    freq = np.bincount(a, minlength=4) / len(a)
    assert freq == pytest.approx([0.1, 0.18, 0.36, 0.36], abs=0.005)


@pytest.mark.parametrize("text", ["1.5", "-0.1", "0.9,0.8", "abc", ""])
def test_bad_acceptance_is_one_error(text):
    with pytest.raises(SpeculativeError):
        parse_acceptance(text, 3)


# --- --speculative-config -------------------------------------------------------------------------------------
def test_parse_vllm_spec_config():
    ds = resolve_model("deepseek-v3").config
    assert mtp_layers(ds) == 1
    s = parse_speculative_config('{"method": "deepseek_mtp", "num_speculative_tokens": 3}', ds)
    assert (s.method, s.k, s.num_lookahead_tokens, s.given_method) == ("mtp", 3, 3, "deepseek_mtp")
    assert parse_speculative_config('{"method": "mtp"}', ds).k == 1  # vLLM's default: the MTP layer count
    ng = parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5}')
    assert ng.num_lookahead_tokens == 0 and ng.to_vllm()["prompt_lookup_max"] == 5
    eg = parse_speculative_config('{"method": "eagle3", "model": "x/y", "num_speculative_tokens": 2}')
    assert eg.has_draft_model and eg.to_vllm() == {"method": "eagle3", "num_speculative_tokens": 2, "model": "x/y"}


def test_mtp_without_mtp_layers_is_refused_by_name():
    llama = resolve_model("llama-3.1-8b").config
    with pytest.raises(SpeculativeError, match="LlamaForCausalLM has no multi-token-prediction layers"):
        parse_speculative_config('{"method": "mtp", "num_speculative_tokens": 1}', llama)


def test_mtp_layers_read_from_text_config():
    assert mtp_layers({"text_config": {"mtp_num_hidden_layers": 1}}) == 1
    assert mtp_layers({"num_nextn_predict_layers": 0}) == 0


@pytest.mark.parametrize("text", ['{"method": "medusa", "num_speculative_tokens": 2}', '{"method": "eagle"}',
                                  '{"method": "mtp", "model": "x"}', '{"method": "ngram"}', "[1]", "{",
                                  '{"method": "ngram", "num_speculative_tokens": 0}',
                                  '{"method": "ngram", "num_speculative_tokens": 2, "bogus": 1}'])
def test_bad_spec_config_is_one_error(text):
    with pytest.raises(SpeculativeError) as e:
        parse_speculative_config(text)
    assert "\n" not in str(e.value)


# --- the scheduler ----------------------------------------------------------------------------------------------
def _spec_setup(rates, k, **kw):
    cfg = parse_speculative_config({"method": "ngram", "num_speculative_tokens": k})
    return replace(small_setup(**kw), speculative=SpecSimulation(cfg, Acceptance(tuple(rates)), seed=3))


def test_all_accepted_emits_k_plus_one_tokens_a_step():
    # one request, 1000-token prompt, 41 output tokens, k = 3, every draft accepted: the prefill step emits the
    # first token, then each step emits 4: 40 more tokens in 10 steps -> 11 iterations
    work = [RequestSpec(0.0, 1000, 41)]
    res = simulate(_spec_setup([1.0, 1.0, 1.0], 3, cost=AffineCost()), work)
    r = res.requests[0]
    assert r.num_output_tokens == 41
    assert len(res.iterations["tokens"]) == 11
    # every decode step verifies 1 + 3 tokens
    assert list(res.iterations["tokens"][1:]) == [4] * 10


def test_nothing_accepted_is_plain_decoding_in_tokens():
    work = [RequestSpec(0.0, 500, 30)]
    res = simulate(_spec_setup([0.0, 0.0], 2, cost=AffineCost()), work)
    assert res.requests[0].num_output_tokens == 30
    assert len(res.iterations["tokens"]) == 30  # 1 prefill + 29 steps of one token each


def test_spec_run_conserves_requests_and_tokens():
    from graphsim.serving.requests import parse_lengths, synthetic

    work = synthetic(200, 20.0, parse_lengths("100:1500", "in"), parse_lengths("10:200", "out"), seed=2)
    plain = simulate(small_setup(num_blocks=800, max_num_seqs=32, mnbt=1024), work)
    spec = simulate(_spec_setup([0.8, 0.6, 0.4], 3, num_blocks=800, max_num_seqs=32, mnbt=1024), work)
    assert all(r.num_output_tokens == r.max_tokens for r in spec.requests)
    assert spec.iterations["tokens"].max() <= 1024 and spec.iterations["kv_used_blocks"].max() <= 800
    # tokens a verifying sequence emits per step: 1 + 0.8 + 0.8·0.6 + 0.8·0.6·0.4 = 1 + 0.8 + 0.48 + 0.192 = 2.472
    # expected (less where a request's last step is cut at its max_tokens); the first token comes from the prefill
    emitted = sum(r.max_tokens - 1 for r in spec.requests)
    per_step = emitted / spec.iterations["decode_seqs"].sum()
    assert 2.3 < per_step < 2.472 + 0.03
    assert plain.iterations["decode_seqs"].sum() == emitted  # plain decoding: one token a sequence-step
    s = summarize(spec)
    assert s.tpot_ms.count == sum(1 for r in spec.requests if r.max_tokens > 1)
    # reproducible: the same seed gives the same run
    again = simulate(_spec_setup([0.8, 0.6, 0.4], 3, num_blocks=800, max_num_seqs=32, mnbt=1024), work)
    assert (again.iterations["tokens"] == spec.iterations["tokens"]).all()


def test_lookahead_slots_take_blocks():
    # block size 16: a request at 1000 computed tokens verifying 1 + 3 tokens with 3 lookahead slots holds
    # ceil((1000 + 4 + 3) / 16) = 63 blocks, where plain decoding holds ceil(1001 / 16) = 63 too; at 1005 computed:
    # ceil(1012 / 16) = 64 against ceil(1006 / 16) = 63
    cfg = parse_speculative_config({"method": "eagle", "model": "x", "num_speculative_tokens": 3})
    st = SpecSimulation(cfg, Acceptance((1.0, 1.0, 1.0))).state(0)
    from tests.serving.serving_helpers import llama_layout

    layout = llama_layout()
    sched = np.asarray([4])
    slots = st.slots(sched, np.asarray([5]))
    assert slots[0] == 7
    assert layout.held_blocks(np.asarray([1005]), slots)[0] == 64
    assert layout.held_blocks(np.asarray([1005]), np.asarray([1]))[0] == 63


def test_cli_refuses_mtp_without_mtp_layers(capsys):
    # refused before any trace: one line, exit 2
    from graphsim.cli.app import main

    code = main(["predict", "llama-3.1-8b", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'])
    err = capsys.readouterr().err
    assert code == 2 and "LlamaForCausalLM has no multi-token-prediction layers" in err and "Traceback" not in err


def test_steady_state_decode_steps_and_draft_tokens():
    from graphsim.serving.spec_search import DraftTokens, steady_osl

    # osl 201 at E = 1 + 0.5 + 0.25 = 1.75 tokens a step: 200 decode tokens in round(200 / 1.75) = 114 steps
    assert steady_osl(201, Acceptance((0.5, 0.5))) == 115
    assert steady_osl(1, Acceptance((0.5,))) == 1
    calls = []

    class Rec:
        def step_us(self, *a):
            calls.append(a)
            return 1.0, 0

    # a steady-state step of 10 decodes and a 100-token chunk: the verify step schedules 10 × 3 drafts more
    DraftTokens(Rec(), 3).step_us(110, 11, 10, 500.0, [(100, 0)])
    assert calls == [(140, 11, 10, 500.0, [(100, 0)])]


@pytest.mark.parametrize("cmd", [["predict", "llama-3.1-8b"], ["kv", "llama-3.1-8b"],
                                 ["simulate", "llama-3.1-8b", "--rate", "1", "-n", "5"],
                                 ["search", "llama-3.1-8b", "--gpus", "1"]])
@pytest.mark.parametrize("bad", ["{", '{"method": "ngram", "num_speculative_tokens": -1}',
                                 '{"method": "eagle", "num_speculative_tokens": 2}'])
def test_bad_speculative_config_is_one_line_on_every_command(cmd, bad, capsys):
    from graphsim.cli.app import main

    code = main([*cmd, "--speculative-config", bad])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_acceptance_default_is_mtp_only(capsys):
    # 0.85 is DeepSeek-V3's MTP figure: the other methods need theirs given (kv, which does not use it, does not ask)
    assert parse_acceptance(None, 2).rates == (0.85, 0.85)
    with pytest.raises(SpeculativeError, match="method ngram needs --spec-acceptance"):
        parse_acceptance(None, 2, "ngram")
    from graphsim.cli.app import main

    sc = '{"method": "ngram", "num_speculative_tokens": 2}'
    assert main(["simulate", "llama-3.1-8b", "--rate", "1", "-n", "5", "--speculative-config", sc]) == 2
    assert "method ngram needs --spec-acceptance" in capsys.readouterr().err


def test_another_draft_tp_is_refused_by_name():
    s = parse_speculative_config({"method": "draft_model", "model": "x", "num_speculative_tokens": 2,
                                  "draft_tensor_parallel_size": 1})
    s.check_tp(1)  # the target's TP: priced
    with pytest.raises(SpeculativeError, match="draft_tensor_parallel_size 1 differs from the target's "
                                               "tensor_parallel_size 2"):
        s.check_tp(2)
    assert s.to_vllm()["draft_tensor_parallel_size"] == 1


def test_eagle_checkpoint_is_read_as_its_family(tmp_path):
    # an EAGLE-3 head's config names vLLM's architecture; its one layer is a Llama layer (hidden 4096, 8 kv heads)
    import json

    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import plan_deployment
    from graphsim.serving.speculative import draft_model

    base = dict(resolve_model("llama-3.1-8b").config)
    (tmp_path / "config.json").write_text(json.dumps({**base, "architectures": ["LlamaForCausalLMEagle3"],
                                                      "num_hidden_layers": 1, "draft_vocab_size": 32000}))
    spec = parse_speculative_config({"method": "eagle3", "model": str(tmp_path), "num_speculative_tokens": 3})
    d = draft_model(spec)
    assert d.architecture == "LlamaForCausalLM" and d.config["vocab_size"] == 32000
    assert "LlamaForCausalLMEagle3 read as LlamaForCausalLM" in d.name
    dep = plan_deployment(DeploymentConfig.parse({"model": "llama-3.1-8b", "hardware": "h200",
                                                  "speculative_config": spec.to_vllm()}))
    plain = plan_deployment(DeploymentConfig.parse({"model": "llama-3.1-8b", "hardware": "h200"}))
    # one more Llama layer of KV: 2 × 8 kv heads × 128 × 2 B = 4096 B a token more (32 → 33 layers)
    assert dep.layout.bytes_per_token - plain.layout.bytes_per_token == 4096
    assert dep.budget.term("draft weights").bytes > 0 and dep.capacity.num_blocks < plain.capacity.num_blocks
