"""An `.onnx` file → graphsim's IR (`import_onnx`).

What becomes what:

- **Values.** Graph inputs that are not initializers become `Graph.inputs`; initializers (dense
  and sparse) become `Graph.params`, so `param_count()` is the sum of initializer sizes. Weights
  are never read: the file is loaded without its external data.
- **Shapes** come from the file's value_info, completed by `onnx.shape_inference.infer_shapes`
  (with data propagation). A value whose shape stays unknown gets a rank-0 placeholder spec and is
  listed in `meta["unknown_shapes"]`; a dim with neither value nor name gets a fresh symbol.
- **Symbolic dims.** Every `dim_param` becomes a positive-integer sympy symbol of the same name
  (non-identifier characters become `_`); a `dim_param` that is an expression (`2*s0`,
  `past_len + seq_len`) becomes that expression over those symbols. The token symbol `T`
  replaces a name only when the graph inputs have exactly one dynamic dim name left after
  `dim_symbols` and that name reads like a token count (contains `tok`, `seq`, `len` or `ctx`,
  is `t`, or is torch.export's anonymous `s<k>`). `dim_symbols` maps names explicitly, e.g.
  `{"sequence_length": "T", "batch": 1}`. `meta["dim_symbols"]` records the mapping used.
  A `dim_param` counts as an expression when it holds one of `* / ( ) + ,` or a space; so
  `past-len` is a name (symbol `past_len`), `s0 - 1` an expression.
- **Ops** map through `onnx_ops` (see there). An op with no IR kind becomes `Op.OPAQUE` with
  `OpaqueAttrs(target="onnx::<OpType>")`; the sorted distinct targets are
  `meta["opaque_ops"]`, counts per target `meta["opaque_counts"]`. No node is dropped.
- **Scope.** From torch.onnx (dynamo) node metadata `pkg.torch.onnx.name_scopes` when present
  (the innermost module path; `module_type` from `pkg.torch.onnx.class_hierarchy`), otherwise
  from a path-like node name: `/model/layers.0/self_attn/q_proj/MatMul` →
  `model.layers.0.self_attn.q_proj` (the components before the last `/`, joined by `.`; a
  name `/Mul` is the root scope ""). A node with neither (e.g. one an ONNX optimiser inserted)
  takes the scope of the node that produces its first input; failing that, the scope its
  readers share; failing that, "".
- **Layer index.** The first all-digit scope component that follows a named one
  (`model.layers.3.mlp` → 3); none → `None`.
- **meta**: `source_format` ("onnx"), `source`, `ir_version`, `opset` (domain → version),
  `producer`, `onnx_graph_name`, `param_count`, `dim_symbols`, `shape_inference`, `opaque_ops`,
  `opaque_counts`, and `unknown_shapes` / `unsupported_dtypes` when there are any.
- Model-local functions are inlined first; control flow (If/Loop/Scan) and sequence ops stay
  OPAQUE nodes (their subgraphs are not descended into).
- No layer schedule: an ONNX file states every layer, so `Graph.schedule` is None.

Unreadable, corrupt or malformed files raise `GraphsimError` with a one-line message. `onnx` is
imported only inside `import_onnx`.
"""

from __future__ import annotations

import ast
import heapq
import itertools
import keyword
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sympy

from graphsim.errors import GraphsimError
from graphsim.importers.onnx_ops import DEFAULT_DOMAINS, ONNX_DTYPES, NodeView, map_node, onnx_target
from graphsim.ir import (
    DType, Graph, GraphMeta, Node, Op, OpaqueAttrs, T, TensorSpec, dim_symbol, parse_dim, split_value, value_name,
)
from graphsim.ir.tensor import Dim

PROVENANCE = "onnx_importer"
TOKEN_DIM = re.compile(r"tok|seq|len|ctx|^t$|^s\d+$", re.IGNORECASE)
_DIM_EXPR = re.compile(r"[A-Za-z0-9_+\-*/(), ]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_DIM_FUNCTIONS = {"Max": sympy.Max, "Min": sympy.Min, "floor": sympy.floor, "ceiling": sympy.ceiling, "Mod": sympy.Mod}
_NO_MODULE = "empty_nn_module_stack"  # torch.export's marker for nodes outside any module
# Ops that keep a small constant's values (in order): axes etc. are read through them.
_VALUE_PRESERVING = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Cast"})


def import_onnx(path: str | Path, *, dim_symbols: Mapping[str, str | int] | None = None) -> Graph:
    """Read an ONNX model file into a verified graphsim `Graph` (see the module docstring)."""
    onnx = _require_onnx()
    path = Path(path)
    model = _load(onnx, path)
    if model.functions:  # model-local functions (e.g. modules exported as functions): inline them
        try:
            import onnx.inliner

            model = onnx.inliner.inline_local_functions(model)
        except Exception:  # left as calls, which import as OPAQUE nodes and are reported
            pass
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        inference = "ok"
    except Exception as e:  # a model shape inference rejects still imports with its own value_info
        inference = f"failed: {_one_line(e)}"
    return _Importer(onnx, model, path, dict(dim_symbols or {}), inference).run()


def _require_onnx() -> Any:
    try:
        import onnx
        import onnx.numpy_helper
        import onnx.shape_inference
    except ImportError:
        raise GraphsimError("reading .onnx files needs the onnx package; install it with `pip install onnx`") from None
    return onnx


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    text = text or type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _load(onnx: Any, path: Path) -> Any:
    if not path.exists():
        raise GraphsimError(f"cannot read {path}: no such file")
    if not path.is_file():
        raise GraphsimError(f"cannot read {path}: not a file; pass a .onnx model file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise GraphsimError(
            f"{path} is not a readable ONNX model ({_one_line(e)}); pass a file written by torch.onnx.export or onnx.save"
        ) from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.output:
        raise GraphsimError(f"{path} is not an ONNX model (it holds no graph with outputs); pass a file written by onnx.save")
    return model


def _is_expression(s: str) -> bool:
    """`2*s0`, `s0 + 1`, `Max(1, s0)` are expressions; `past-len` or `batch_size` are names."""
    return bool(_DIM_EXPR.fullmatch(s)) and any(c in s for c in "*/()+, ")


def _safe_name(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit():
        s = "d_" + s
    if keyword.iskeyword(s) or s in _DIM_FUNCTIONS:
        s += "_"
    return s


def scope_of(node: Any) -> tuple[str, str] | None:
    """(module scope, innermost module class) of an ONNX node, None when the node says nothing."""
    meta = {p.key: p.value for p in getattr(node, "metadata_props", ())}
    scopes = _literal_list(meta.get("pkg.torch.onnx.name_scopes"))
    if scopes is not None:
        path = ""
        for part in scopes[:-1]:  # the last entry names the fx node itself
            if not part or _NO_MODULE in part:
                continue
            path = part if (not path or part.startswith(path + ".")) else f"{path}.{part}"
        classes = _literal_list(meta.get("pkg.torch.onnx.class_hierarchy")) or []
        module_type = classes[-2].rsplit(".", 1)[-1] if len(classes) >= 2 and path else ""
        return path, module_type
    name = node.name
    if "/" not in name:
        return None
    parts = [p for p in name.split("/")[:-1] if p]
    return ".".join(parts), ""


def layer_of(scope: str) -> int | None:
    parts = scope.split(".")
    for prev, part in itertools.pairwise(parts):
        if part.isdigit() and not prev.isdigit():
            return int(part)
    return None


def _literal_list(text: str | None) -> list[str] | None:
    if not text:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else None


class _Importer:
    def __init__(self, onnx: Any, model: Any, path: Path, dim_symbols: dict[str, str | int], inference: str):
        self.onnx, self.model, self.path, self.inference = onnx, model, path, inference
        g = model.graph
        self.opsets = {(o.domain or ""): int(o.version) for o in model.opset_import}
        self.initializers = {t.name: t for t in g.initializer}
        self.sparse = {s.values.name: s for s in g.sparse_initializer}
        self.producers = {o: n for n in g.node for o in n.output if o}
        self.types: dict[str, tuple[int, list[Any] | None]] = {}
        for vi in itertools.chain(g.input, g.value_info, g.output):
            if vi.type.HasField("tensor_type"):
                tt = vi.type.tensor_type
                dims = None
                if tt.HasField("shape"):
                    dims = [d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None
                            for d in tt.shape.dim]
                # A value may be listed more than once (input/value_info/output): the first known
                # dtype and the first known shape win; a vaguer listing never replaces them.
                elem, known_dims = self.types.get(vi.name, (0, None))
                self.types[vi.name] = (elem or tt.elem_type, known_dims if known_dims is not None else dims)
        self.fresh = itertools.count()
        self.unknown_shapes: list[str] = []
        self.unsupported_dtypes: set[str] = set()
        self.symbols: dict[str, Dim] = {}
        self._setup_symbols(dim_symbols)

    # --- symbols --------------------------------------------------------------------------------
    def _setup_symbols(self, overrides: dict[str, str | int]) -> None:
        for name, target in overrides.items():
            self.symbols[name] = target if isinstance(target, int) else parse_dim(str(target))
        names: list[str] = []
        for vi in self.model.graph.input:
            if vi.name in self.initializers or vi.name in self.sparse:
                continue
            for d in self.types.get(vi.name, (0, None))[1] or []:
                if isinstance(d, str) and d:
                    for n in _IDENT.findall(d) if _is_expression(d) else [d]:
                        if n not in _DIM_FUNCTIONS and n not in self.symbols and n not in names:
                            names.append(n)
        if len(names) == 1 and TOKEN_DIM.search(names[0]):
            self.symbols[names[0]] = T

    def _param_dim(self, s: str) -> Dim:
        if s in self.symbols:
            return self.symbols[s]
        expr: Dim | None = None
        if _is_expression(s):
            try:
                local = {n: _DIM_FUNCTIONS.get(n) or self._param_dim(n) for n in _IDENT.findall(s)}
                parsed = sympy.sympify(s, locals=local)  # pyright: ignore[reportCallIssue]  (sympy's overloads omit `locals`)
                if isinstance(parsed, sympy.Expr):
                    expr = int(parsed) if parsed.is_Integer else parsed
            except (sympy.SympifyError, SyntaxError, TypeError, ValueError):
                expr = None
        if expr is None:
            expr = dim_symbol(_safe_name(s))
        self.symbols[s] = expr
        return expr

    def _dim(self, d: Any) -> Dim:
        if isinstance(d, int):
            return d
        if isinstance(d, str) and d:
            return self._param_dim(d)
        return dim_symbol(f"unk_dim_{next(self.fresh)}")

    def _dtype(self, elem: int, where: str) -> DType:
        dt = ONNX_DTYPES.get(elem)
        if dt is None:
            self.unsupported_dtypes.add(f"{where}: {self.onnx.TensorProto.DataType.Name(elem) if elem else 'UNDEFINED'}")
            return DType.UINT8
        return dt

    def _value_spec(self, name: str) -> TensorSpec | None:
        info = self.types.get(name)
        if info is None or info[1] is None or info[0] == 0:
            return None
        return TensorSpec(tuple(self._dim(d) for d in info[1]), self._dtype(info[0], name))

    # --- import ---------------------------------------------------------------------------------
    def run(self) -> Graph:
        g = self.model.graph
        params: dict[str, TensorSpec] = {}
        for t in g.initializer:
            params[t.name] = TensorSpec(tuple(int(d) for d in t.dims), self._dtype(t.data_type, t.name))
        for s in g.sparse_initializer:
            params[s.values.name] = TensorSpec(tuple(int(d) for d in s.dims), self._dtype(s.values.data_type, s.values.name))
        inputs: dict[str, TensorSpec] = {}
        for vi in g.input:
            if vi.name in params:
                continue
            spec = self._value_spec(vi.name)
            if spec is None:
                raise GraphsimError(f"{self.path}: graph input '{vi.name}' has no tensor type; the model is malformed")
            inputs[vi.name] = spec

        value_map: dict[str, str] = {k: k for k in itertools.chain(inputs, params)}  # ONNX value → IR value
        specs: dict[str, TensorSpec] = {**inputs, **params}
        weights: set[str] = set(params)  # initializers and values computed from them (+ constants) only
        consts: set[str] = set()
        used_names: set[str] = set(value_map)
        nodes: list[Node] = []
        opaque: dict[str, int] = {}
        scopes: dict[str, str] = {}  # IR node name → scope
        unscoped: set[int] = set()  # indices of nodes that found no scope at all

        for idx, n in self._topological(g, set(value_map)):
            domain = n.domain or ""
            attrs = {a.name: self._attr(a) for a in n.attribute}
            in_names = list(n.input)
            in_specs = [specs[value_map[i]] if i else None for i in in_names]
            out_names = list(n.output)
            while out_names and not out_names[-1]:
                out_names.pop()
            out_specs = [self._output_spec(o, in_specs) for o in out_names] or [self._placeholder(f"{n.name}:out", in_specs)]
            view = NodeView(
                op_type=n.op_type, domain=domain, attrs=attrs, inputs=in_names, input_specs=in_specs,
                output_specs=out_specs, weight_inputs=[bool(i) and i in weights for i in in_names],
                const_ints=lambda i, _ins=in_names: self._const_ints(_ins[i]) if i < len(_ins) and _ins[i] else None,
                opset=self.opsets.get(domain if domain not in DEFAULT_DOMAINS else "", 1),
            )
            target = onnx_target(n.op_type, domain)
            try:
                mapped = map_node(view)
            except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, AttributeError):
                mapped = None
            if mapped is None:
                mapped = (Op.OPAQUE, OpaqueAttrs(target=target))
                opaque[target] = opaque.get(target, 0) + 1
            found = scope_of(n)
            if found is None:  # no scope of its own: that of its first input's producer, if any
                first = next((value_map[i] for i in in_names if i and i not in params and i not in inputs), None)
                found = (scopes.get(split_value(first)[0], ""), "") if first else ("", "")
                if not found[0]:
                    unscoped.add(len(nodes))
            scope, module_type = found
            name = self._unique(n.name or (out_names[0] if out_names else "") or f"{n.op_type}_{idx}", used_names)
            scopes[name] = scope
            nodes.append(Node(
                name=name, op=mapped[0], inputs=tuple(value_map[i] for i in in_names if i),
                outputs=tuple(out_specs), attrs=mapped[1], scope=scope, module_type=module_type,
                layer=layer_of(scope), target=target, provenance=PROVENANCE,
            ))
            present = [i for i in in_names if i]
            for k, o in enumerate(out_names):
                if not o:
                    continue
                value_map[o] = value_name(name, k)
                specs[value_map[o]] = out_specs[k]
                if n.op_type == "Constant" and domain in DEFAULT_DOMAINS:
                    consts.add(o)
                elif present and all(i in weights or i in consts for i in present):
                    (weights if any(i in weights for i in present) else consts).add(o)

        self._scope_from_readers(nodes, unscoped)
        outputs = []
        for o in g.output:
            if o.name not in value_map:
                raise GraphsimError(f"{self.path}: graph output '{o.name}' is never computed; the model is malformed")
            outputs.append(value_map[o.name])

        graph = Graph(name=self.path.stem, inputs=inputs, params=params, nodes=nodes, outputs=outputs,
                      meta=self._meta(params, opaque))
        graph.verify("onnx importer")
        return graph

    @staticmethod
    def _scope_from_readers(nodes: list[Node], unscoped: set[int]) -> None:
        """A node that found no scope (a bare Constant, say) takes its readers' scope if they agree."""
        if not unscoped:
            return
        readers: dict[str, Counter[str]] = {}
        for n in nodes:
            for v in n.inputs:
                readers.setdefault(split_value(v)[0], Counter())[n.scope] += 1
        for i in sorted(unscoped, reverse=True):  # later nodes first: chains resolve back to front
            found = [k for k, c in readers.get(nodes[i].name, Counter()).items() if c > 0]
            if len(found) == 1 and found[0]:
                scope = found[0]
                nodes[i] = nodes[i].with_(scope=scope, layer=layer_of(scope))
                for v in nodes[i].inputs:
                    counts = readers[split_value(v)[0]]
                    counts[""] -= 1
                    counts[scope] += 1

    def _meta(self, params: dict[str, TensorSpec], opaque: dict[str, int]) -> GraphMeta:
        m = self.model
        return GraphMeta(
            source_format="onnx",
            source=str(self.path),
            ir_version=int(m.ir_version),
            opset={(d or "ai.onnx"): v for d, v in self.opsets.items()},
            producer=f"{m.producer_name} {m.producer_version}".strip(),
            onnx_graph_name=m.graph.name,
            param_count=sum(int(s.numel) for s in params.values()),
            dim_symbols={k: str(v) for k, v in self.symbols.items() if not k.startswith("unk_dim_")},
            shape_inference=self.inference,
            opaque_ops=sorted(opaque),
            opaque_counts=dict(sorted(opaque.items())),
            unknown_shapes=list(self.unknown_shapes),
            unsupported_dtypes=sorted(self.unsupported_dtypes),
        )

    def _topological(self, g: Any, defined: set[str]) -> list[tuple[int, Any]]:
        """Nodes in a topological order (the file's own order where it is already valid)."""
        producer: dict[str, int] = {}
        for i, n in enumerate(g.node):
            for o in n.output:
                if o:
                    producer[o] = i
        waiting: list[set[int]] = []
        readers: dict[int, list[int]] = {}
        for i, n in enumerate(g.node):
            deps = set()
            for v in n.input:
                if not v or v in defined:
                    continue
                if v not in producer:
                    raise GraphsimError(
                        f"{self.path}: node '{n.name or n.op_type}' reads '{v}', which no node, input or initializer defines; the model is malformed"
                    )
                deps.add(producer[v])
            waiting.append(deps)
            for d in deps:
                readers.setdefault(d, []).append(i)
        ready = [i for i, deps in enumerate(waiting) if not deps]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append((i, g.node[i]))
            for r in readers.get(i, ()):
                waiting[r].discard(i)
                if not waiting[r]:
                    heapq.heappush(ready, r)
        if len(order) != len(g.node):
            raise GraphsimError(f"{self.path}: the graph has a cycle; the model is malformed")
        return order

    def _attr(self, a: Any) -> Any:
        value = self.onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            return [v.decode("utf-8", "replace") for v in value]
        return value

    def _const_ints(self, name: str, depth: int = 0) -> list[int] | None:
        """The integer contents of a small constant value (axes, perm, ...), if the file holds it:
        an initializer, a Constant node, or either seen through layout-only ops (Reshape, Cast, ...)."""
        tensor = None
        producer = self.producers.get(name)
        if name in self.initializers:
            tensor = self.initializers[name]
            if tensor.data_location == self.onnx.TensorProto.EXTERNAL:
                return None
        elif producer is not None and producer.op_type in _VALUE_PRESERVING and depth < 8:
            return self._const_ints(producer.input[0], depth + 1) if producer.input else None
        elif producer is not None and producer.op_type == "Constant":
            for a in producer.attribute:
                if a.name == "value":
                    tensor = a.t
                elif a.name == "value_ints":
                    return [int(x) for x in a.ints]
                elif a.name == "value_int":
                    return [int(a.i)]
        if tensor is None:
            return None
        try:
            array = self.onnx.numpy_helper.to_array(tensor)
        except Exception:
            return None
        if array.size > 64 or array.dtype.kind not in "iu":
            return None
        return [int(x) for x in array.ravel()]

    def _output_spec(self, name: str, in_specs: list[TensorSpec | None]) -> TensorSpec:
        if not name:
            return self._placeholder(None, in_specs)
        spec = self._value_spec(name)
        return spec if spec is not None else self._placeholder(name, in_specs)

    def _placeholder(self, name: str | None, in_specs: list[TensorSpec | None]) -> TensorSpec:
        """A rank-0 stand-in for a value whose shape no one could infer (listed in meta)."""
        if name:
            self.unknown_shapes.append(name)
        info = self.types.get(name or "")
        if info and info[0]:
            dtype = self._dtype(info[0], name or "")
        else:
            dtype = next((s.dtype for s in in_specs if s is not None), DType.FLOAT32)
        return TensorSpec((), dtype)

    @staticmethod
    def _unique(base: str, used: set[str]) -> str:
        base = base.replace("#", "_")
        name, k = base, 1
        while name in used:
            name = f"{base}_{k}"
            k += 1
        used.add(name)
        return name
