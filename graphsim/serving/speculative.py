"""Speculative decoding, config-only: vLLM's `--speculative-config`, the acceptance model, and the MTP layers
a checkpoint carries.

vLLM's option (vllm/config/speculative.py `SpeculativeConfig`, vllm-project/vllm at 002e77c1):

    --speculative-config '{"method": "mtp", "num_speculative_tokens": 3}'
    --speculative-config '{"method": "eagle3", "model": "<draft config>", "num_speculative_tokens": 3}'
    --speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'

graphsim reads `method` (`mtp` and vLLM's model-specific MTP names such as `deepseek_mtp`, `qwen3_next_mtp`, which
vLLM maps to `mtp`; `eagle`, `eagle3`, `draft_model`, `ngram`), `num_speculative_tokens` (k; for `mtp` it defaults,
as in vLLM, to the checkpoint's MTP layer count), `model` (the draft for eagle/eagle3/draft_model: a catalog name,
config.json or model directory), `prompt_lookup_max` / `prompt_lookup_min` (n-gram; kept for the launch line).

One speculative step of a decoding sequence (vllm/v1/core/sched/scheduler.py, vllm/v1/spec_decode/eagle.py
`EagleProposer.propose`, vllm-project/vllm at 008603a3):

- the target verifies k + 1 query tokens (the last sampled token and k drafts) over the sequence's context;
- the rejection sampler (vllm/v1/sample/rejection_sampler.py) accepts drafts left to right until the first
  rejection, then emits one more token from the target (the bonus token when all k were accepted), so a step
  emits 1 + a tokens with a ∈ [0, k] accepted drafts;
- the proposer drafts the next k tokens: one forward over the step's verified tokens, then k − 1 forwards of one
  token per sequence (MTP / EAGLE), or a host-side n-gram match over the prompt and output (ngram).

Acceptance (`--spec-acceptance`): a rate p (every draft position accepted with probability p given the earlier
ones were) or a per-position list [a1 … ak] (conditional acceptance of position i given 1 … i−1 were). The
expected tokens a step emits per sequence are

    E = 1 + Σ_{i=1..k} Π_{j≤i} a_j

and the simulator samples a (seeded) as the number of leading accepted positions.

KV: vLLM allocates slots for `num_lookahead_tokens` = k more tokens than a step schedules for EAGLE-style and
draft-model methods (vllm/v1/core/sched/scheduler.py `Scheduler.__init__`: `num_lookahead_tokens =
num_spec_tokens` when `use_eagle()` or `uses_draft_model()`; 0 for ngram), passed to
`KVCacheManager.allocate_slots` (vllm/v1/core/kv_cache_manager.py), and the draft's attention layers keep their
own KV in the same block pool (MTP: `num_nextn_predict_layers` / `mtp_num_hidden_layers` layers of the target's
kind; EAGLE: the draft's layers).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field

from graphsim.errors import GraphsimError
from graphsim.validation import Strict, validate

# Config fields that state a checkpoint's multi-token-prediction layers: DeepSeek-V3/R1, GLM-4.5+, Kimi-K2, MiMo
# (`num_nextn_predict_layers`); Qwen3-Next, Qwen3.5 (`mtp_num_hidden_layers`, in text_config for the wrappers).
MTP_LAYER_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")

METHODS = ("mtp", "eagle", "eagle3", "draft_model", "ngram")
MAX_SPECULATIVE_TOKENS = 64  # far above any deployed k (vLLM's examples use 1–7); guards the O(k) tables


class SpeculativeError(GraphsimError):
    """A speculative-decoding setting that is malformed or that the model cannot use."""


class SpeculativeArgs(Strict):
    """The subset of vLLM's SpeculativeConfig graphsim models (vLLM's names), as a deployment document holds it
    (frozen: hashable, so a DeploymentConfig carrying it is too)."""

    method: str = Field(min_length=1)
    num_speculative_tokens: int | None = Field(default=None, ge=1, le=MAX_SPECULATIVE_TOKENS)
    model: str | None = Field(default=None, min_length=1)
    prompt_lookup_max: int | None = Field(default=None, ge=1, le=1 << 16)
    prompt_lookup_min: int | None = Field(default=None, ge=1, le=1 << 16)
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1, le=4096)


@dataclass(frozen=True)
class SpeculativeConfig:
    """A parsed `--speculative-config`: `method` normalised to one of METHODS, `k` drafts per step."""

    method: Literal["mtp", "eagle", "eagle3", "draft_model", "ngram"]
    num_speculative_tokens: int
    model: str | None = None
    prompt_lookup_max: int | None = None
    prompt_lookup_min: int | None = None
    given_method: str = ""  # as the user spelled it (e.g. deepseek_mtp)
    draft_tensor_parallel_size: int | None = None  # vLLM's; None: the target's TP (the only size graphsim models)

    @property
    def k(self) -> int:
        return self.num_speculative_tokens

    @property
    def num_lookahead_tokens(self) -> int:
        """Extra KV slots per decoding request (vLLM Scheduler.__init__: k for EAGLE-style/MTP and draft models,
        0 for ngram)."""
        return 0 if self.method == "ngram" else self.k

    @property
    def has_draft_model(self) -> bool:
        return self.method in ("eagle", "eagle3", "draft_model")

    def to_vllm(self) -> dict[str, Any]:
        """The JSON vLLM's --speculative-config takes."""
        out: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.k}
        if self.model is not None:
            out["model"] = self.model
        if self.prompt_lookup_max is not None:
            out["prompt_lookup_max"] = self.prompt_lookup_max
        if self.prompt_lookup_min is not None:
            out["prompt_lookup_min"] = self.prompt_lookup_min
        if self.draft_tensor_parallel_size is not None:
            out["draft_tensor_parallel_size"] = self.draft_tensor_parallel_size
        return out

    def check_tp(self, tp: int) -> None:
        """graphsim prices the draft at the target's TP (vLLM's default); another draft TP is refused by name."""
        if self.draft_tensor_parallel_size not in (None, tp):
            raise SpeculativeError(f"draft_tensor_parallel_size {self.draft_tensor_parallel_size} differs from the "
                                   f"target's tensor_parallel_size {tp}: graphsim prices the draft at the target's TP "
                                   "only; drop it or set it to the target's")

    def to_args(self) -> SpeculativeArgs:
        return SpeculativeArgs(**self.to_vllm())

    def to_cli(self) -> str:
        return json.dumps(self.to_vllm(), separators=(",", ":"))

    def describe(self) -> str:
        draft = f", draft {self.model}" if self.model else ""
        return f"{self.method}, k={self.k}{draft}"


_FIX = ('give JSON as vLLM takes it, e.g. --speculative-config \'{"method": "mtp", "num_speculative_tokens": 3}\' '
        f"(methods: {', '.join(METHODS)})")


def parse_speculative_config(text: str | dict[str, Any] | SpeculativeArgs, model_config: dict[str, Any] | None = None) -> SpeculativeConfig:
    """`text` (vLLM's JSON, or the dict) checked, with `method` normalised. `model_config`: the target's
    config.json, to default k for `mtp` to its MTP layer count and to refuse `mtp` on a model without MTP layers."""
    if isinstance(text, SpeculativeArgs):
        text = text.model_dump(exclude_none=True)
    if isinstance(text, str):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpeculativeError(f"--speculative-config is not JSON ({e.msg} at column {e.colno}); {_FIX}") from None
    else:
        data = text
    if not isinstance(data, dict):
        raise SpeculativeError(f"--speculative-config must be a JSON object; {_FIX}")
    try:
        raw = validate(SpeculativeArgs, data, "--speculative-config", _FIX)
    except ValueError as e:
        raise SpeculativeError(str(e)) from None
    given = raw.method.strip().lower()
    # vLLM maps its model-specific MTP names (MTPModelTypes: deepseek_mtp, qwen3_next_mtp, glm4_moe_mtp, …) to mtp
    method = "mtp" if given == "mtp" or given.endswith("_mtp") else given
    if method not in METHODS:
        raise SpeculativeError(f"--speculative-config method '{raw.method}' is not modelled; use one of "
                               f"{', '.join(METHODS)} (or a vLLM MTP name such as deepseek_mtp)")
    if method in ("eagle", "eagle3", "draft_model") and raw.model is None:
        raise SpeculativeError(f"--speculative-config method {method} needs \"model\": the draft's catalog name, "
                               "config.json or model directory")
    if method in ("mtp", "ngram") and raw.model is not None:
        raise SpeculativeError(f"--speculative-config method {method} takes no \"model\" (the MTP layers are the "
                               "target's own; n-gram drafts from the prompt); drop it")
    k = raw.num_speculative_tokens
    if method == "mtp" and model_config is not None:
        layers = mtp_layers(model_config)
        if layers == 0:
            arch = ",".join(model_config.get("architectures") or []) or model_config.get("model_type", "this model")
            raise SpeculativeError(f"{arch} has no multi-token-prediction layers (its config states none of "
                                   f"{', '.join(MTP_LAYER_FIELDS)} > 0), so method mtp cannot run on it; use eagle/"
                                   "eagle3 with a draft model, or ngram")
        k = k or layers  # vLLM: defaults to the draft config's n_predict (the MTP layer count)
    if k is None:
        raise SpeculativeError(f"--speculative-config needs num_speculative_tokens for method {method}")
    return SpeculativeConfig(method, k, raw.model, raw.prompt_lookup_max, raw.prompt_lookup_min, raw.method,  # type: ignore[arg-type]
                             raw.draft_tensor_parallel_size)


def draft_model(spec: SpeculativeConfig) -> Any:
    """The draft checkpoint of eagle/eagle3/draft_model, resolved (`graphsim.catalog.resolve_model`). EAGLE heads name
    architectures only vLLM knows (vllm/model_executor/models/registry.py `_SPECULATIVE_DECODING_MODELS`:
    `EagleLlamaForCausalLM`, `Eagle3LlamaForCausalLM`, `LlamaForCausalLMEagle3`, …) whose layers are their family's
    decoder layers, so such a draft is read as that family's causal LM: the architecture without its `Eagle`/`Eagle3`
    affix (`LlamaForCausalLMEagle3` → `LlamaForCausalLM`), stated in `ResolvedModel.name`."""
    import re
    from dataclasses import replace

    from graphsim.catalog import resolve_model

    if spec.model is None:
        raise SpeculativeError(f"method {spec.method} needs a draft model (\"model\" in --speculative-config)")
    resolved = resolve_model(spec.model)
    arch = resolved.architecture
    base = re.sub(r"Eagle3?", "", arch)
    if base != arch and base.endswith("ForCausalLM"):
        config = {**resolved.config, "architectures": [base]}
        note = f"{arch} read as {base}"
        draft_vocab = config.get("draft_vocab_size")
        if isinstance(draft_vocab, int) and 0 < draft_vocab < int(config.get("vocab_size") or 0):
            # EAGLE-3's head predicts over its own smaller vocabulary (vllm/model_executor/models/llama_eagle3.py
            # `draft_vocab_size`); its embedding is the target's, shared (counted there)
            config["vocab_size"] = draft_vocab
            note += f", LM head over draft_vocab_size {draft_vocab}"
        return replace(resolved, config=config, name=f"{resolved.name} ({note})")
    return resolved


def mtp_layers(model_config: dict[str, Any]) -> int:
    """The MTP layers a checkpoint's config states (0 when none), read from the config or its text_config."""
    for cfg in (model_config, model_config.get("text_config") or {}):
        if not isinstance(cfg, dict):
            continue
        for name in MTP_LAYER_FIELDS:
            value = cfg.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


# --- acceptance -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Acceptance:
    """Conditional acceptance per draft position: `rates[i]` = P(position i+1 accepted | positions 1..i were)."""

    rates: tuple[float, ...]
    given: str = ""  # as the user wrote it

    @property
    def k(self) -> int:
        return len(self.rates)

    def cumulative(self) -> np.ndarray:
        """P(at least i drafts accepted) for i = 1..k: Π_{j≤i} a_j."""
        return np.cumprod(np.asarray(self.rates, dtype=np.float64))

    def expected_accepted(self) -> float:
        """Expected accepted drafts per step: Σ_{i=1..k} Π_{j≤i} a_j."""
        return float(self.cumulative().sum())

    def expected_tokens(self) -> float:
        """Expected tokens a step emits per sequence: the accepted drafts plus the target's one (bonus) token."""
        return 1.0 + self.expected_accepted()

    def distribution(self) -> np.ndarray:
        """P(a accepted) for a = 0..k: P(≥ a) − P(≥ a+1)."""
        at_least = np.concatenate([[1.0], self.cumulative(), [0.0]])
        return at_least[:-1] - at_least[1:]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Accepted drafts for n sequences: leading accepted positions, each accepted with its conditional rate."""
        if n == 0 or self.k == 0:
            return np.zeros(n, dtype=np.int64)
        ok = rng.random((n, self.k)) < np.asarray(self.rates)[None, :]
        # leading run of accepted positions: index of the first rejection (k when none)
        first_reject = np.where(ok.all(axis=1), self.k, np.argmin(ok, axis=1))
        return first_reject.astype(np.int64)

    def describe(self) -> str:
        rates = ", ".join(f"{a:g}" for a in self.rates)
        return f"acceptance [{rates}] per position: {self.expected_tokens():.3f} tokens per step expected"


# Without --spec-acceptance: 0.85 at every position, the low end of the one published figure found, DeepSeek-V3's
# technical report (arXiv 2412.19437 §5.4.3: "the acceptance rate of the second token prediction ranges between
# 85% and 90%", its one MTP module, k = 1). Deeper positions and other models are unmeasured: a stated assumption.
DEFAULT_RATE = 0.85
DEFAULT_ACCEPTANCE_NOTE = (f"no --spec-acceptance: {DEFAULT_RATE} per draft position assumed (DeepSeek-V3 report, "
                           "arXiv 2412.19437 §5.4.3: 85-90 % for its first MTP draft), not a measurement of this model "
                           "or workload")


def parse_acceptance(text: str | None, k: int, method: str = "mtp") -> Acceptance:
    """`--spec-acceptance`: a rate `0.8` (every position), or a per-position list `0.9,0.7,0.5` / `[0.9,0.7,0.5]`
    of length k. None: DEFAULT_RATE at every position for `mtp` (stated by DEFAULT_ACCEPTANCE_NOTE); the other
    methods have no published figure graphsim could apply (an EAGLE head's or an n-gram match's acceptance is its
    own and the workload's), so they need it given."""
    if text is None:
        if method != "mtp":
            raise SpeculativeError(f"method {method} needs --spec-acceptance (a rate, or one per draft position): the "
                                   f"{DEFAULT_RATE} default is DeepSeek-V3's MTP figure and says nothing about {method}")
        return Acceptance(tuple([DEFAULT_RATE] * k), "")
    body = text.strip().strip("[]")
    try:
        values = [float(v) for v in body.replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise SpeculativeError(f"--spec-acceptance '{text}' is not a rate or a list of rates; give e.g. 0.8 or "
                               "0.9,0.7,0.5 (one per draft position)") from None
    if not values or any(not (0.0 <= v <= 1.0) for v in values):
        raise SpeculativeError(f"--spec-acceptance '{text}': rates must lie in [0, 1]; give e.g. 0.8 or 0.9,0.7,0.5")
    if len(values) == 1:
        return Acceptance(tuple(values * k), text)
    if len(values) != k:
        raise SpeculativeError(f"--spec-acceptance lists {len(values)} rates but num_speculative_tokens is {k}; give "
                               f"one rate, or exactly {k}")
    return Acceptance(tuple(values), text)


def acceptance_from(rates: Sequence[float]) -> Acceptance:
    return Acceptance(tuple(float(r) for r in rates))


# --- the simulator's speculative state ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecSimulation:
    """What the simulator needs: k, the lookahead slots, the acceptance model and a seed (each engine draws from
    its own stream, seeded by (seed, engine index), so a run is reproducible)."""

    config: SpeculativeConfig
    acceptance: Acceptance
    seed: int = 0
    states: list[SpecState] = field(default_factory=list, compare=False, repr=False)  # the engines' (after a run)

    def state(self, engine_index: int) -> SpecState:
        st = SpecState(self.config.k, self.config.num_lookahead_tokens, self.acceptance,
                       np.random.default_rng([self.seed, engine_index]))
        self.states.append(st)
        return st

    def to_json(self) -> dict[str, Any]:
        """The configuration, the acceptance model and what the engines' sampled steps realised."""
        verified = sum(s.verified for s in self.states)
        drafted = sum(s.drafted for s in self.states)
        accepted = sum(s.accepted for s in self.states)
        return {"speculative_config": self.config.to_vllm(), "acceptance": list(self.acceptance.rates),
                "expected_tokens_per_step": self.acceptance.expected_tokens(), "seed": self.seed,
                "verified_sequence_steps": verified, "drafted": drafted, "accepted": accepted,
                "realised_acceptance": accepted / drafted if drafted else None,
                "realised_tokens_per_step": 1 + accepted / verified if verified else None}

    def describe(self) -> str:
        d = self.to_json()
        real = (f"; realised {d['realised_tokens_per_step']:.3f} tokens a step over {d['verified_sequence_steps']:,} "
                "verifying sequence-steps") if d["verified_sequence_steps"] else ""
        return f"speculative decoding {self.config.describe()}: {self.acceptance.describe()}{real}"


class SpecState:
    """One engine's speculative decoding: which scheduled requests verify drafts, and what they accept."""

    def __init__(self, k: int, lookahead: int, acceptance: Acceptance, rng: np.random.Generator) -> None:
        self.k, self.lookahead, self.acceptance, self.rng = k, lookahead, acceptance, rng
        self.verified = 0  # sequence-steps that verified drafts
        self.drafted = 0  # drafts verified
        self.accepted = 0  # drafts accepted (and emitted)

    def with_drafts(self, remaining, num_output_tokens):
        """Tokens to schedule: a decoding request (one token left, past its first output) adds its k drafts
        (vLLM: `num_tokens_with_spec − num_computed_tokens`)."""
        return remaining + self.k * ((remaining == 1) & (num_output_tokens >= 1))

    def verifying(self, scheduled, num_output_tokens):
        """The scheduled requests that verify k drafts this step."""
        return (scheduled == self.k + 1) & (num_output_tokens >= 1)

    def slots(self, scheduled, num_output_tokens):
        """Tokens to allocate slots for: the scheduled ones plus `num_lookahead_tokens` for verifying requests
        (KVCacheManager.allocate_slots' num_lookahead_tokens)."""
        if not self.lookahead:
            return scheduled
        return scheduled + self.lookahead * self.verifying(scheduled, num_output_tokens)

    def settle(self, computed, num_tokens, num_output_tokens, max_tokens):
        """After a step: requests whose computed tokens ran past their tokens verified drafts. Sample the accepted
        count a (at most the drafts scheduled, and no more than the request still may emit beyond the target's
        one token), undo the rejected drafts' computation (vLLM: `num_computed_tokens -= num_rejected`), and
        return a per-request count of extra tokens emitted (a); `computed` is set back to `num_tokens` for
        them, so the caller's usual "computed == tokens → one token" rule gives the target's token."""
        over = computed - num_tokens
        ver = over > 0
        extra = np.zeros(len(computed), dtype=np.int64)
        n = int(ver.sum())
        if not n:
            return extra
        a = self.acceptance.sample(self.rng, n)
        room = np.maximum(max_tokens[ver] - num_output_tokens[ver] - 1, 0)
        a = np.minimum(np.minimum(a, over[ver]), room)
        computed[ver] = num_tokens[ver]
        extra[ver] = a
        self.verified += n
        self.drafted += int(over[ver].sum())
        self.accepted += int(a.sum())
        return extra

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "verified_sequence_steps": self.verified, "drafted": self.drafted,
                "accepted": self.accepted,
                "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
                "tokens_per_sequence_step": 1 + self.accepted / self.verified if self.verified else None}
