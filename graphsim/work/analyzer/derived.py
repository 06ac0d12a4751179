"""Location maps derived from kernel order and kind: the long tail without a map file per family.

A shipped map (`work/location_maps/*.json`) names every location of one location set; a family whose
module tree differs only in names (GPT-2's `attn.c_attn`, BERT's `attention.self.query`, Mamba2's
`mixer.in_proj`) needs a file of its own although its layer is the same sequence of kernels. Where no
shipped map fits, `derive_map` builds one from what both sides already say, never from amounts:

- **the accountant's rows**, in the order `layer_block_weights` lists them — the order of the model's
  forward (pre-norm, input projections, core, output projection; then the FFN) — and their parts
  (`attn.norm`, `attn.qkv`, `ffn.router`, ...);
- **the deployment's sites** of one fold region, in CostTree order (the kernels' order in the step),
  and their kernel kinds (`gemm`, `rms_norm`, `attention`, `moe_experts`, ...).

Rules, per fold region (each a sequence alignment; anything else leaves the deployment unsupported,
with the reason):

0. A kernel whose scope role is exactly a row's module (`self_attn.o_proj/o_proj` and
   `attn.out:self_attn.o_proj`, `self_attn.q_norm/rms_norm` and `attn.norm:self_attn.q_norm`) takes
   that row, whatever the order; the rules below place the rest.
1. Norm kernels (`rms_norm`, `fused_add_rms_norm`, `layer_norm`) take the norm rows (parts `*.norm`)
   one to one, in order (pre- and post-norm layouts alike: GPT-2's `ln_1`/`ln_2`, BERT's
   `attention.output.LayerNorm`/`output.LayerNorm`, Jamba's dt/B/C norms, a gated norm). Once every
   norm row is placed, a norm kernel left over is a norm without weights (OLMo, NanoChat: the
   accountant's parameter count equals transformers' meta model's, so no weighted norm is missing).
2. GEMM kernels, except a router's, take the linear rows (attention `qkv`/`q`/`kv`/`in`/`out`, the
   dense MLP, the shared expert), in order. A kernel may take a whole run of rows vLLM packs into one
   GEMM — q/k/v (`QKVParallelLinear`, vllm/model_executor/layers/linear.py), gate/up
   (`MergedColumnParallelLinear`, same file), MLA's q_a/kv_a (`fused_qkv_a_proj`,
   vllm/model_executor/models/deepseek_v2.py), a KDA layer's q/k/v/b (`qkvb_proj`, with Kimi's f_a `in_proj_qkvgfab`),
   LFM2's w1/w3 (`w13`) — or each
   row alone; the one packing whose kernel count
   matches is used, and none or several matching is unsupported.
3. The attention core rows (`attn.core`: the scores and values or the recurrence with its KV/state
   traffic, and the mixer's per-head vectors) go to the one `attention` / `linear_attention` kernel; a
   convolution weight (`*.conv1d`, `*.conv`) to the one `conv1d` kernel where there is one. A layer
   with a `conv1d` kernel and no attention kernel (LFM2's short convolution) puts the whole core there;
   a layer running attention and Mamba2 side by side (Falcon-H1: `attn.core:compute` and
   `attn.core:ssm`) gives each its kernel and the mixer's vectors to the kernel whose scope holds them.
4. MoE: the router rows to the GEMM right before the `moe_router` kernel (the kernel itself where no
   GEMM precedes it), the routed experts to the one `moe_experts` kernel.
5. Idle cross-attention weights (`attn.cross`: an encoder–decoder's decoder run as a causal LM has no
   encoder output; the accountant counts them as parameters and never reads them) sit with the core.
6. Every other kernel (rotary, activation epilogues, residual adds, casts, copies) has no compulsory
   work. Outside the layers: the embedding segment goes to the first embedding kernel before the
   layers, the final norm to the first norm kernel after them and the head to the last GEMM after
   them; other kernels there (a position table, OPT's project_in/out, BERT's head transform) have no
   row of their own: the accountant counts them inside those segments, so their work shows at the
   segment's location (R7 there shows them as an excess here and a deficit there).

7. A DSA indexer's rows (`attn.index`: its projections and key norm) and hyper-connection gate weights
   (`attn.hc` / `ffn.hc`: HunYuan-V4's iHC `fn`, `base`, `scale`) are placed by module: every row of a module goes to
   the one kernel whose scope role is that module (`self_attn.indexer.wq_b/wq_b`, `attn_hc/triton_ihc_pre`), or
   the one GEMM of its parent module where vLLM packs it (`self_attn.indexer/wk_weights_proj`), which takes no other
   row; the indexer's scoring and key-cache traffic (`attn.core:indexer`) goes to the one
   `sparse_attn_indexer` kernel.

Rows of any other part (compressors, latent MoE projections, layer scalars) and regions with several attention
kernels or several expert kernels are left to shipped maps.
In vLLM's compiled mode a generated kernel (`triton_fused`, passes/fuse/vllm_inductor.py) replaces norms, rotary,
activations and elementwise kernels; the rules run on the kernels it replaced (`Site.members`, at the custom-op
graph's locations and kinds) and `maps.merged_view` gives it the rows of all of them (Qwen3's q and k norms in one
kernel take both norm rows).
The derived map is checked by the same exactly-once rules (`check_map`) and reconciled like any other;
that the alignment found each module's kernel is checked in tests against the kernels' own shapes.
"""

from __future__ import annotations

from itertools import product

from graphsim.work.analyzer.locations import Site, member_sites, split_location
from graphsim.work.analyzer.maps import LocationMap, MapChoice, MapEntry, check_map
from graphsim.work.analyzer.rows import (
    CORE_MODULE, INDEXER_MODULE, OUTSIDE, PARALLEL_SSM_MODULE, Row, RowSet, UnsupportedDeployment,
)

DERIVED_ID = "derived"
DERIVED_VERSION = 1
DERIVED_PATH = "derived by graphsim/work/analyzer/derived.py"  # where a shipped map shows its file
DERIVED_TITLE = ("derived from the kernels' order and kinds and the accountant's rows "
                 "(graphsim.work.analyzer.derived)")

_NORM_KINDS = frozenset({"rms_norm", "fused_add_rms_norm", "layer_norm"})
_CORE_KINDS = frozenset({"attention", "linear_attention"})
_NO_WORK_KINDS = frozenset({"rotary", "act_and_mul", "activation", "elementwise"})
# Parts whose rows are placed by module alone: each module's rows go to the one kernel whose scope role is that module
# (a DSA indexer's projections and key norm, HunYuan-V4's iHC gate weights: fn, base and scale of `attn_hc` / `ffn_hc`
# read by its `triton_ihc_pre`).
_BY_MODULE_PARTS = frozenset({"attn.index", "attn.hc", "ffn.hc"})
_LINEAR_PARTS = frozenset({"attn.qkv", "attn.q", "attn.kv", "attn.in", "attn.gate", "attn.out", "ffn.mlp", "ffn.shared"})
# Leaf module names vLLM packs into one GEMM when they are adjacent rows: q/k/v (QKVParallelLinear), gate/up
# (MergedColumnParallelLinear), and MLA's two down-projections (vllm/model_executor/models/deepseek_v2.py
# DeepseekV2MLAAttention: fused_qkv_a_proj, a MergedColumnParallelLinear of q_lora_rank and kv_lora_rank +
# qk_rope_head_dim, where q_lora_rank is set).
_MLA_A = frozenset({"q_a_proj", "kv_a_proj_with_mqa"})
# A KDA layer's q/k/v and beta (vLLM 0.33.0 bailing_moe_v3.py qkvb_proj; the fuse rule's `qkvb_proj`), with Kimi's
# forget-gate f_a (kimi_gdn_linear_attn.py in_proj_qkvgfab; the fuse rule's `in_proj_qkvgfab`), tried before q/k/v alone.
_QKVB = frozenset({"q_proj", "k_proj", "v_proj", "b_proj"})
_QKVBFA = _QKVB | {"f_a_proj"}
_PACKS = (_QKVBFA, _QKVB, frozenset({"q_proj", "k_proj", "v_proj"}), frozenset({"gate_proj", "up_proj"}),
          frozenset({"w1", "w3"}), _MLA_A)


def _leaf(row: Row) -> str:
    return row.ref.split(":", 1)[1].rsplit(".", 1)[-1] if ":" in row.ref else row.ref


def _runs(rows: list[Row]) -> list[list[Row]]:
    """The rows cut into runs: a stretch of rows whose leaves make up exactly one packable set (q/k/v and gate/up
    within one part; MLA's q_a and kv_a across attn.q and attn.kv), else single rows."""
    out: list[list[Row]] = []
    i = 0
    while i < len(rows):
        for pack in _PACKS:
            n = len(pack)
            run = rows[i:i + n]
            one_part = len({r.part for r in run}) == 1 or pack == _MLA_A
            if len(run) == n and {_leaf(r) for r in run} == pack and one_part:
                out.append(run)
                i += n
                break
        else:
            out.append([rows[i]])
            i += 1
    return out


def _module(row: Row) -> str:
    return row.ref.split(":", 1)[1] if ":" in row.ref else ""


def _named(rows: list[Row], sites: list[str]) -> dict[str, Row]:
    """Kernels whose scope role is exactly one row's module (`self_attn.o_proj/o_proj` and
    `attn.out:self_attn.o_proj`): these pairs stand by name, whatever the order."""
    out: dict[str, Row] = {}
    for at in sites:
        match = [r for r in rows if _module(r) == at.split("/", 1)[0]]
        if len(match) == 1 and match[0] not in out.values():
            out[at] = match[0]
    return out


def _mla_a_first(rows: list[Row]) -> list[Row]:
    """MLA's rows as the accountant lists them (q_a, q_b, kv_a, kv_b) with kv_a moved up to q_a, the order of
    vLLM's kernels when it packs the two (fused_qkv_a_proj, then q_b_proj and kv_b_proj); unpacked, both a
    projections are named kernels (`self_attn.q_a_proj/q_a_proj`) and never reach this order."""
    leaves = [_leaf(r) for r in rows]
    if "q_a_proj" in leaves and "kv_a_proj_with_mqa" in leaves:
        kv_a = rows[leaves.index("kv_a_proj_with_mqa")]
        rest = [r for r in rows if r is not kv_a]
        i = [_leaf(r) for r in rest].index("q_a_proj")
        return [*rest[: i + 1], kv_a, *rest[i + 1:]]
    return rows


def _align_linear(rows: list[Row], sites: list[str], region: str) -> dict[str, list[Row]]:
    """Each GEMM location's rows: a kernel named as one module takes that row; over the rest, in order, every
    packable run either packed into one GEMM or one GEMM per row, and exactly one choice must give as many GEMMs
    as there are."""
    named = _named(rows, sites)
    out = {at: [r] for at, r in named.items()}
    rows = _mla_a_first([r for r in rows if r not in named.values()])
    sites = [at for at in sites if at not in named]
    runs = _runs(rows)
    packable = [i for i, r in enumerate(runs) if len(r) > 1]
    fits: list[list[list[Row]]] = []
    for choice in product((True, False), repeat=len(packable)):
        packed = dict(zip(packable, choice, strict=True))
        groups: list[list[Row]] = []
        for i, run in enumerate(runs):
            groups += [run] if packed.get(i, True) else [[r] for r in run]
        if len(groups) == len(sites):
            fits.append(groups)
    if len(fits) != 1:
        names = ", ".join(r.ref for r in rows)
        why = "no packing" if not fits else f"{len(fits)} packings"
        raise UnsupportedDeployment(f"{region}: {len(sites)} GEMM kernels and the linear rows {names}: {why} of the "
                                    "rows (q/k/v, gate/up packed or not) gives that many GEMMs")
    out.update({at: group for at, group in zip(sites, fits[0], strict=True)})
    return out


def _one(sites: list[str], what: str, region: str) -> str:
    if len(sites) != 1:
        raise UnsupportedDeployment(f"{region}: {len(sites)} {what} kernels where the derived map needs one")
    return sites[0]


def _region_entries(region: str, sites: list[Site], rows: tuple[Row, ...]) -> list[MapEntry]:
    ats = [split_location(s.location)[1] for s in sites]
    kinds = [s.kind for s in sites]
    assigned: dict[str, list[Row]] = {at: [] for at in ats}
    notes: dict[str, str] = {}
    taken: set[str] = set()  # kernels rule 0 gave their rows: no other rule places rows there

    def of_kind(ks: frozenset[str] | set[str]) -> list[str]:
        return [at for at, k in zip(ats, kinds, strict=True) if k in ks and at not in taken]

    known = {"attn.core", "attn.cross", "ffn.router", "ffn.routed"} | _LINEAR_PARTS | _BY_MODULE_PARTS
    other = sorted({r.part for r in rows if r.part not in known and not r.part.endswith(".norm")})
    if other:
        raise UnsupportedDeployment(f"{region}: rows of part(s) {', '.join(other)} need a shipped location map")
    odd = sorted({k for k in kinds if k not in _NORM_KINDS | _CORE_KINDS | _NO_WORK_KINDS
                  | {"gemm", "conv1d", "moe_router", "moe_experts", "sparse_indexer"}})
    if odd:
        raise UnsupportedDeployment(f"{region}: kernels of kind(s) {', '.join(odd)} need a shipped location map")

    # 0. rows placed by module alone (_BY_MODULE_PARTS); their kernels take no other row
    for r in rows:
        if r.part in _BY_MODULE_PARTS:  # a module's row (`self_attn.indexer.wq_b`) or its parameter's (`attn_hc.fn`)
            mod = _module(r)
            mine = [at for at in ats if at.split("/", 1)[0] == mod] or \
                [at for at in ats if "." in mod and at.split("/", 1)[0] == mod.rsplit(".", 1)[0]]
            if len(mine) > 1:  # a module packed into its parent's GEMM (the indexer's `wk_weights_proj`, whose scope
                mine = [at for at in mine if kinds[ats.index(at)] == "gemm"]  # also holds sparse_attn_indexer)
            at = _one(mine, f"{mod!r}", region)
            assigned[at].append(r)
            taken.add(at)
    rows = tuple(r for r in rows if r.part not in _BY_MODULE_PARTS)

    # 3'. a DSA indexer's scoring and key-cache traffic (the `indexer` core row) to its one sparse_indexer kernel
    index_core = [r for r in rows if r.ref == f"attn.core:{INDEXER_MODULE}"]
    indexers = of_kind({"sparse_indexer"})
    if index_core or indexers:
        assigned[_one(indexers, "sparse_indexer", region)] += index_core
        rows = tuple(r for r in rows if r not in index_core)

    # 1. norms: by name, then one to one in order; with every norm row placed, a norm kernel left over is a
    # weightless norm (OLMo's LayerNorm, NanoChat's RMSNorm: the accountant's parameters equal the meta model's)
    norm_rows = [r for r in rows if r.part.endswith(".norm")]
    norm_sites = of_kind(_NORM_KINDS)
    named = _named(norm_rows, norm_sites)
    for at, r in named.items():
        assigned[at].append(r)
    norm_rows = [r for r in norm_rows if r not in named.values()]
    norm_sites = [at for at in norm_sites if at not in named]
    if norm_rows and len(norm_rows) != len(norm_sites):
        raise UnsupportedDeployment(f"{region}: {len(norm_sites)} norm kernels for {len(norm_rows)} norm rows "
                                    f"({', '.join(r.ref for r in norm_rows)}) not named by their kernels")
    for at, r in zip(norm_sites, norm_rows, strict=False):
        assigned[at].append(r)
    for at in norm_sites[len(norm_rows):]:
        notes[at] = "a norm without weights"

    # 4. MoE router and experts
    router_rows = [r for r in rows if r.part == "ffn.router"]
    routed_rows = [r for r in rows if r.part == "ffn.routed"]
    router_gemm: str | None = None
    if router_rows or routed_rows:
        topk = _one(of_kind({"moe_router"}), "moe_router", region)
        experts = _one(of_kind({"moe_experts"}), "moe_experts", region)
        i = ats.index(topk)
        before = next((j for j in range(i - 1, -1, -1) if kinds[j] not in _NO_WORK_KINDS), None)
        router_gemm = ats[before] if before is not None and kinds[before] == "gemm" else None
        assigned[router_gemm or topk] += router_rows
        assigned[experts] += routed_rows
    elif of_kind({"moe_router", "moe_experts"}):
        raise UnsupportedDeployment(f"{region}: MoE kernels but no router or expert rows")

    # 2. linear rows over the GEMMs (the router's excepted)
    linear_rows = [r for r in rows if r.part in _LINEAR_PARTS]
    gemms = [at for at in of_kind({"gemm"}) if at != router_gemm]
    for at, group in _align_linear(linear_rows, gemms, region).items():
        assigned[at] += group

    # 3. the core, its convolution, and idle cross-attention weights (5.)
    core_rows = [r for r in rows if r.part == "attn.core"]
    cross_rows = [r for r in rows if r.part == "attn.cross"]
    core_sites, conv_sites = of_kind(_CORE_KINDS), of_kind({"conv1d"})
    ssm = [r for r in core_rows if r.ref == f"attn.core:{PARALLEL_SSM_MODULE}"]
    if ssm:  # attention and Mamba2 side by side (Falcon-H1): each kernel its own core, the mixer's vectors by scope
        attn_at = _one(of_kind({"attention"}), "attention", region)
        ssm_at = _one(of_kind({"linear_attention"}), "linear_attention", region)
        conv_at = _one(conv_sites, "conv1d", region)
        ssm_role = ssm_at.split("/", 1)[0]
        for r in core_rows:
            at = (ssm_at if r in ssm else conv_at if _leaf(r) in ("conv1d", "conv")
                  else ssm_at if _module(r).startswith(ssm_role + ".") else attn_at)
            assigned[at].append(r)
        core_rows = []
    if core_rows or cross_rows:
        # a short convolution with no attention kernel (LFM2's ShortConv: no core weights but the convolution's) is
        # the core itself; any other core without an attention kernel (an unrolled recurrence) is not placed
        conv_only = all(r.ref == f"attn.core:{CORE_MODULE}" or _leaf(r) in ("conv1d", "conv") for r in core_rows)
        core = (_one(core_sites, "attention", region) if core_sites or not conv_only
                else _one(conv_sites, "attention or conv1d", region))
        conv = [r for r in core_rows if _leaf(r) in ("conv1d", "conv")]
        if conv_sites and core_sites:
            assigned[_one(conv_sites, "conv1d", region)] += conv
        assigned[core] += [r for r in core_rows if not (conv_sites and core_sites and r in conv)] + cross_rows
        if cross_rows:
            notes[core] = ("with the idle cross-attention weights: counted as parameters, never read without an "
                           "encoder output")
    elif (core_sites or conv_sites) and not ssm:
        raise UnsupportedDeployment(f"{region}: an attention or convolution kernel but no core rows")
    return [MapEntry(region, at, tuple(r.ref for r in assigned[at]), notes.get(at, "")) for at in ats]


def _outside_entries(sites: list[Site], layer_span: tuple[int, int], rows: tuple[Row, ...]) -> list[MapEntry]:
    first, last = layer_span
    refs = {r.ref for r in rows}
    outside = [(i, split_location(s.location)[1], s.kind) for i, s in enumerate(sites) if s.region == OUTSIDE]
    before = [(at, k) for i, at, k in outside if i < first]
    after = [(at, k) for i, at, k in outside if i > last]
    picks: dict[str, str] = {}
    if "embed" in refs:
        emb = [at for at, k in before if k == "embedding"]
        if not emb:
            raise UnsupportedDeployment("outside: no embedding kernel before the layers for the embed row")
        picks[emb[0]] = "embed"
    if "final_norm" in refs:
        norm = [at for at, k in after if k in _NORM_KINDS]
        if not norm:
            raise UnsupportedDeployment("outside: no norm kernel after the layers for the final_norm row")
        picks[norm[0]] = "final_norm"
    if "head" in refs:
        head = [at for at, k in after if k == "gemm"]
        if not head:
            raise UnsupportedDeployment("outside: no GEMM after the layers for the head row")
        picks[head[-1]] = "head"
    out = []
    for _, at, kind in outside:
        note = ("" if at in picks or kind in _NO_WORK_KINDS
                else "no row of its own: the accountant counts its weights in the embed / final_norm / head segment")
        out.append(MapEntry(OUTSIDE, at, (picks[at],) if at in picks else (), note))
    return out


def derive_map(sites: list[Site], rows: RowSet, fuse_target: str) -> LocationMap:
    """A location map for this deployment by the rules above; raises `UnsupportedDeployment` naming the region
    and the rule that does not apply."""
    own = [s for s in member_sites(sites) if not s.communication]  # a generated kernel as the kernels it replaced
    in_layers = [i for i, s in enumerate(own) if s.region != OUTSIDE]
    if not in_layers:
        raise UnsupportedDeployment("no kernels inside the layers")
    entries: list[MapEntry] = _outside_entries(own, (in_layers[0], in_layers[-1]), rows.of_region(OUTSIDE))
    for region in dict.fromkeys(s.region for s in own if s.region != OUTSIDE):
        entries += _region_entries(region, [s for s in own if s.region == region], rows.of_region(region))
    return LocationMap(DERIVED_ID, DERIVED_VERSION, DERIVED_TITLE, fuse_target, tuple(entries),
                       ("Rules: graphsim/work/analyzer/derived.py (kernel order and kind against the accountant's row "
                        "order and parts).",), DERIVED_PATH)


def derived_choice(shipped: MapChoice, sites: list[Site], rows: RowSet, fuse_target: str) -> MapChoice:
    """The derived map where no shipped map fits (`shipped`, from `select_map`), checked by the exactly-once rules;
    else `shipped`'s reason with the derivation's."""
    try:
        m = derive_map(sites, rows, fuse_target)
    except UnsupportedDeployment as e:
        return MapChoice(None, f"{shipped.reason}; no map derived either: {e}", shipped.candidates)
    check = check_map(m, sites, rows, fuse_target)
    if not check.ok:  # pragma: no cover - the rules place every row and list every location once
        return MapChoice(None, f"{shipped.reason}; the derived map breaks the rules: {'; '.join(check.problems[:4])}",
                         shipped.candidates)
    return MapChoice(check, "", shipped.candidates)
