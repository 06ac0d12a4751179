"""Every registered architecture end to end, as a user would try it (issue 16): a tiny config built from the
class defaults of its pinned transformers config class, then, in process through `graphsim.cli.app.main`,

    graphsim predict <cfg> --gpu h100 -b decode:4x128 --json             (tp 1 and -tp 2)
    graphsim kv <cfg> --gpu h100 --max-model-len 512 --json
    graphsim simulate <cfg> --gpu h100 --concurrency 2 -n 4 --input-len 64 --output-len 8 --max-model-len 512 --json

Per class and command: `ok`, `error` (exit 2 with its one `error:` line) or `TRACEBACK` (any other exception, the
bug this sweep hunts), and the share of predict's tp 1 decode step spent in approximate (placeholder) kernels.

    python benchmarks/architectures_sweep.py [--only NAME] [--commands predict1,predict2,kv,simulate] [--json]

The tiny config (`tiny_config`): the class defaults (with the fields tests/work/test_work_config_defaults.py's
`_UNBUILDABLE_DEFAULTS` adds where transformers cannot build its own defaults), then fewer attention heads (4,
the KV heads in the same ratio), the hidden size and every FFN width scaled by the same factor (so the head size
is kept), at most 8 routed experts (at least top-k, a multiple of the expert groups), a vocabulary of at most 4096
(a token id beyond it is dropped). The depth is kept: many classes carry per-layer lists (layer_types,
mlp_layer_types, full_attn_idxs, ...) tied to it, and the importer traces one layer per distinct type anyway.
A multimodal wrapper shrinks its text_config. Traces go to the graph cache ($GRAPHSIM_HOME/cache/graphs).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "predict1": ["predict", "{cfg}", "--gpu", "h100", "-b", "decode:4x128", "--json"],
    "predict2": ["predict", "{cfg}", "--gpu", "h100", "-b", "decode:4x128", "-tp", "2", "--json"],
    "kv": ["kv", "{cfg}", "--gpu", "h100", "--max-model-len", "512", "--json"],
    "simulate": ["simulate", "{cfg}", "--gpu", "h100", "--concurrency", "2", "-n", "4", "--input-len", "64",
                 "--output-len", "8", "--max-model-len", "512", "--json"],
}
TINY_HEADS = 4
MAX_EXPERTS = 8
MAX_VOCAB = 4096
# Widths that scale with the hidden size (the FFN sizes of the registered classes' config classes).
_FFN_KEYS = (
    "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size", "ffn_dim", "decoder_ffn_dim",
    "n_inner", "dense_intermediate_size", "shared_intermediate_size", "moe_shared_expert_intermediate_size",
    "intermediate_size_mlp", "expert_ffn_hidden_size", "ffn_hidden_size", "dff",
)
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "n_embed", "dim")
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "decoder_attention_heads")
# Mamba2 head counts of hybrid classes (Bamba, GraniteMoeHybrid): heads × head dim must stay expand × hidden.
_SSM_HEAD_KEYS = ("mamba_n_heads", "mamba_num_heads", "n_mamba_heads")
_SSM_GROUP_KEYS = ("mamba_n_groups", "n_groups", "mamba_ngroups")
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads")
_EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts")
_TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "moe_k", "top_k")
_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id",
               "decoder_start_token_id", "mask_token_id")


# Class defaults whose forward transformers itself cannot run, and the field a real checkpoint sets: DbrxConfig()
# leaves clip_qkv None, which DbrxAttention hands to clamp as both bounds (dbrx-instruct's config.json: 8).
_FORWARD_DEFAULTS: dict[str, dict[str, Any]] = {
    "DbrxForCausalLM": {"attn_config": {"kv_n_heads": 1, "rope_theta": 500000.0, "clip_qkv": 8}},
}


# Fields a config class computes from others, which its class-default dict holds for the default sizes: dropped from
# the tiny config so the class computes them again from the shrunk ones (Zamba2Config: attention_hidden_size =
# 2 × hidden_size, num_query_groups = num_attention_heads, hybrid_layer_ids from layers_block_type, ...).
_DERIVED_FIELDS: dict[str, tuple[str, ...]] = {
    "Zamba2ForCausalLM": ("attention_hidden_size", "attention_head_dim", "kv_channels", "num_query_groups",
                          "hybrid_layer_ids", "mamba_headdim"),
}


def _defaults_module() -> Any:
    """tests/work/test_work_config_defaults.py: its class-default configs (`_default_config`, the wrappers'
    `_NESTED_DEFAULTS`) are the sweep's starting point."""
    name = "test_work_config_defaults"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "work" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _first_key(cfg: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool)), None)


def shrink(cfg: dict[str, Any]) -> dict[str, Any]:
    """A small model of the same class (see the module docstring); `cfg` is a text model's config dict."""
    out = dict(cfg)
    hk = _first_key(out, _HEAD_KEYS)
    heads = out[hk] if hk else 0
    if hk and heads > TINY_HEADS and heads % TINY_HEADS == 0:
        g = heads // TINY_HEADS  # heads per kept head; the KV heads keep their ratio (at least one)
        kk = _first_key(out, _KV_KEYS)
        if kk and out[kk] % g == 0:
            out[kk] = out[kk] // g
        elif kk:
            out[kk] = 1 if out[kk] < heads else TINY_HEADS
        out[hk] = TINY_HEADS
        hid = _first_key(out, _HIDDEN_KEYS)
        if hid and out[hid] % g == 0:
            out[hid] = out[hid] // g
            # (only where the scan width is expand × hidden: Falcon-H1's is mamba_d_ssm, kept)
            head_dim = next((cfg[k] for k in ("mamba_d_head", "mamba_head_dim", "mamba_headdim")
                             if isinstance(cfg.get(k), int)), None)
            expand = next((cfg[k] for k in ("mamba_expand", "expand") if isinstance(cfg.get(k), int)), None)
            for k in _SSM_HEAD_KEYS:
                groups = next((out[gk] for gk in _SSM_GROUP_KEYS if isinstance(out.get(gk), int)), 1)
                v = out.get(k)
                tied = head_dim is not None and expand is not None and v == expand * cfg[hid] // head_dim
                # (no fewer than TINY_HEADS Mamba heads where the class has them: vLLM's MambaMixer2 splits its
                # heads over the tp ranks, so a one-head tiny mixer would be refused at tp 2 for the shrink's sake)
                small = max(v // g, min(v, TINY_HEADS)) if isinstance(v, int) and g else 0
                if tied and isinstance(v, int) and v % small == 0 and small % max(groups, 1) == 0:
                    out[k] = small
            for k in _FFN_KEYS:
                v = out.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    out[k] = max(16, v // g // 16 * 16)
                elif isinstance(v, list) and all(isinstance(x, int) for x in v):
                    out[k] = [max(16, x // g // 16 * 16) for x in v]
    ek = _first_key(out, _EXPERT_KEYS)
    if ek and out[ek] > MAX_EXPERTS:
        tk = _first_key(out, _TOPK_KEYS)
        top_k = out[tk] if tk else 1
        groups = out.get("n_group") if isinstance(out.get("n_group"), int) else 1
        n = max(MAX_EXPERTS, top_k * 2)
        n = math.ceil(n / max(groups or 1, 1)) * max(groups or 1, 1)
        if n < out[ek]:
            zero = out.get("zero_expert_num")  # LongCat-Flash: identity experts, in proportion (top-k divides)
            if isinstance(zero, int) and zero and (zero * n) % out[ek] == 0:
                out["zero_expert_num"] = zero * n // out[ek]
            out[ek] = n
    vocab = out.get("vocab_size")
    if isinstance(vocab, int) and vocab > MAX_VOCAB:
        out["vocab_size"] = MAX_VOCAB
        if out.get("decoder_vocab_size") == vocab:  # Marian: the decoder's table is the (tied) vocabulary
            out["decoder_vocab_size"] = MAX_VOCAB
        for k in _TOKEN_KEYS:  # (some config classes insist on an int: the last id of the small vocabulary)
            v = out.get(k)
            if isinstance(v, int) and v >= MAX_VOCAB:
                out[k] = MAX_VOCAB - 1
            elif isinstance(v, list):
                out[k] = [min(x, MAX_VOCAB - 1) if isinstance(x, int) else x for x in v]
    return out


def tiny_config(arch: str) -> dict[str, Any]:
    """The tiny config.json of a registered architecture (class defaults, shrunk)."""
    from graphsim.work.builders.modern_b import TEXT_CONFIG_NESTED

    t = _defaults_module()
    if arch in TEXT_CONFIG_NESTED:
        full = t._config_class(arch)(text_config=t._NESTED_DEFAULTS.get(arch)).to_dict()
        full["text_config"] = shrink(full["text_config"])
    else:
        full = shrink(t._default_config(arch) | _FORWARD_DEFAULTS.get(arch, {}))
        full = {k: v for k, v in full.items() if k not in _DERIVED_FIELDS.get(arch, ())}
    return {**{k: v for k, v in full.items() if k != "transformers_version"}, "architectures": [arch]}


def _placeholder_share(out: str) -> float | None:
    try:
        batch = json.loads(out)["batches"][0]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    total = batch.get("total_us") or sum(k.get("total_us") or 0.0 for k in batch["kernels"])
    approx = sum(k.get("total_us") or 0.0 for k in batch["kernels"] if k.get("approximate"))
    return approx / total if total else None


def run_command(argv: list[str]) -> tuple[str, str, str]:
    """(status, one line, stdout) of `graphsim <argv>` in this process: ok / error / TRACEBACK."""
    from graphsim.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except Exception as e:  # the CLI let an exception through: a traceback a user would see
        tb = traceback.extract_tb(e.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
        return "TRACEBACK", " ".join(f"{type(e).__name__}: {e}".split())[:200] + f" [{where}]", out.getvalue()
    if code == 0:
        return "ok", "", out.getvalue()
    lines = [ln for ln in err.getvalue().strip().splitlines() if ln.strip()]
    return "error", " ".join((lines[-1] if lines else f"exit {code}").split())[:200], out.getvalue()


def sweep_one(arch: str, commands: list[str], folder: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"architecture": arch}
    try:
        cfg = tiny_config(arch)
    except Exception as e:  # the class defaults themselves do not make a config: not graphsim's doing
        row["config"] = " ".join(f"{type(e).__name__}: {e}".split())[:200]
        return row
    d = folder / arch
    d.mkdir(parents=True, exist_ok=True)
    path = d / "config.json"
    path.write_text(json.dumps(cfg))
    for name in commands:
        t0 = time.perf_counter()
        status, line, out = run_command([a.replace("{cfg}", str(path)) for a in COMMANDS[name]])
        row[name] = {"status": status, "line": line, "s": round(time.perf_counter() - t0, 2)}
        if name == "predict1" and status == "ok":
            row["placeholder_share"] = _placeholder_share(out)
    return row


def summary(rows: list[dict[str, Any]], commands: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name in commands:
        counts = {"ok": 0, "error": 0, "TRACEBACK": 0, "no config": 0}
        for r in rows:
            counts[r[name]["status"] if name in r else "no config"] += 1
        out[name] = counts
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--only", action="append", help="an architecture name (repeatable)")
    ap.add_argument("--commands", default=",".join(COMMANDS), help=f"a comma list of {', '.join(COMMANDS)}")
    ap.add_argument("--json", action="store_true", help="rows and summary as JSON")
    ap.add_argument("--out", type=Path, help="a folder to keep the tiny configs in (default: a temp folder)")
    args = ap.parse_args(argv)
    from graphsim.work.registry import supported_architectures

    archs = list(supported_architectures())
    if args.only:
        unknown = [a for a in args.only if a not in archs]
        if unknown:
            print(f"error: not registered: {', '.join(unknown)}", file=sys.stderr)
            return 2
        archs = args.only
    commands = [c for c in args.commands.split(",") if c]
    bad = [c for c in commands if c not in COMMANDS]
    if bad:
        print(f"error: unknown command(s) {', '.join(bad)}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphsim-sweep-") as tmp:
        folder = args.out or Path(tmp)
        for arch in archs:
            row = sweep_one(arch, commands, folder)
            rows.append(row)
            if not args.json:
                cells = [f"{c}={row[c]['status']}" if c in row else f"{c}=-" for c in commands]
                share = row.get("placeholder_share")
                cells.append(f"placeholders={share:.1%}" if isinstance(share, float) else "placeholders=-")
                problems = [f"{c}: {row[c]['line']}" for c in commands if c in row and row[c]["line"]]
                if "config" in row:
                    problems.append(f"config: {row['config']}")
                print(f"{arch:48s} {' '.join(cells)}" + "".join(f"\n    {p}" for p in problems), flush=True)
    totals = summary(rows, commands)
    over = [r["architecture"] for r in rows if (r.get("placeholder_share") or 0.0) > 0.01]
    if args.json:
        print(json.dumps({"rows": rows, "summary": totals, "placeholders_over_1pct": over}, indent=1))
    else:
        print(f"\n{len(rows)} architectures")
        for name, counts in totals.items():
            print(f"{name:9s} " + "  ".join(f"{k} {v}" for k, v in counts.items()))
        print(f"predict tp 1 placeholders > 1 %: {len(over)}" + (f" ({', '.join(over)})" if over else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
