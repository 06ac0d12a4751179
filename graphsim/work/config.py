"""Typed, validated reads of config.json fields; every failure is a one-line `ConfigError`.

Messages name the architecture, the field and the fix, e.g.
`config.json (LlamaForCausalLM) is missing required field 'hidden_size'; add it to the config`.
"""

from __future__ import annotations

from typing import Any, overload

from graphsim.errors import ConfigError
from graphsim.work.config_defaults import FRAME_KEYS, class_aliases, class_defaults
from graphsim.work.dtypes import DType, parse_dtype

_MISSING = object()


class ConfigView:
    """Read-only typed access to one config dict, for one architecture.

    A field absent from the config reads as the architecture's transformers config-class default
    (`config_defaults`), as transformers itself would build the model; the frame fields
    (`FRAME_KEYS`) stay required. A field present as JSON null, or absent with a class default of
    None, reads as missing: the builder's own rule applies (e.g. head_dim = hidden / heads).
    """

    def __init__(self, cfg: dict[str, Any], architecture: str) -> None:
        self.cfg = cfg
        self.arch = architecture
        self.defaults = class_defaults(architecture)
        # transformers' attribute_map: a field may be stated under its alias (and defaulted under either name)
        aliases = class_aliases(architecture)
        self.names: dict[str, tuple[str, ...]] = {}
        for alias, target in aliases.items():
            self.names[target] = (*self.names.get(target, (target,)), alias)
            self.names[alias] = (*self.names.get(alias, (alias,)), target)

    def _where(self) -> str:
        return f"config.json ({self.arch})"

    def has(self, key: str) -> bool:
        return self._get(key) is not _MISSING

    def _get(self, key: str) -> Any:
        names = self.names.get(key, (key,))
        stated = next((n for n in names if n in self.cfg), None)
        if stated is not None:
            value = self.cfg[stated]
        elif key in FRAME_KEYS:
            value = None
        else:
            value = next((self.defaults[n] for n in names if self.defaults.get(n) is not None), None)
        return _MISSING if value is None else value

    def req_int(self, key: str, minimum: int = 1) -> int:
        value = self._get(key)
        if value is _MISSING:
            raise ConfigError(f"{self._where()} is missing required field '{key}'; add it to the config")
        return self._check_int(key, value, minimum)

    @overload
    def opt_int(self, key: str, default: int, minimum: int = 1) -> int: ...
    @overload
    def opt_int(self, key: str, default: None, minimum: int = 1) -> int | None: ...

    def opt_int(self, key: str, default: int | None, minimum: int = 1) -> int | None:
        value = self._get(key)
        if value is _MISSING:
            return default
        return self._check_int(key, value, minimum)

    def _check_int(self, key: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise ConfigError(f"{self._where()} field '{key}' is {value!r}, not an integer; fix the config")
        if value < minimum:
            raise ConfigError(f"{self._where()} field '{key}' is {value}, must be at least {minimum}; fix the config")
        return int(value)

    def req_int_at(self, key: str, layer: int, layers: int, minimum: int = 1) -> int:
        """Layer `layer`'s value of a field the config may state per layer: an integer for every layer, or a list
        of one integer a layer (transformers' `int | list[int]` fields, e.g. HunYuanMoEV1Config.moe_topk, read
        as `config.moe_topk[layer_idx]` by HunYuanMoEV1Gate)."""
        value = self._get(key)
        if isinstance(value, (list, tuple)):
            if len(value) != layers:
                raise ConfigError(f"{self._where()} field '{key}' lists {len(value)} values for {layers} layers; "
                                  "give one a layer or a single integer")
            return self._check_int(key, value[layer], minimum)
        return self.req_int(key, minimum)

    def opt_int_or_null(self, key: str, default: int | None, minimum: int = 1) -> int | None:
        """Like `opt_int`, but an explicit JSON null means None (the default applies only when absent)."""
        if key in self.cfg and self.cfg[key] is None:
            return None
        return self.opt_int(key, default, minimum)

    def opt_bool(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self._where()} field '{key}' is {value!r}, not true/false; fix the config")
        return value

    def opt_str(self, key: str, default: str) -> str:
        value = self._get(key)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise ConfigError(f"{self._where()} field '{key}' is {value!r}, not a string; fix the config")
        return value

    def opt_int_list(self, key: str, default: tuple[int, ...] = ()) -> tuple[int, ...]:
        value = self._get(key)
        if value is _MISSING:
            return default
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{self._where()} field '{key}' is {value!r}, not a list; fix the config")
        return tuple(self._check_int(key, v, 0) for v in value)

    def opt_str_list(self, key: str) -> tuple[str, ...] | None:
        value = self._get(key)
        if value is _MISSING:
            return None
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self._where()} field '{key}' is not a list of strings; fix the config")
        return tuple(value)

    # --- shared derived quantities -------------------------------------------------------------

    def head_dim(self, heads: int, hidden: int) -> int:
        """Explicit `head_dim`, else hidden_size / num_attention_heads when it divides evenly."""
        explicit = self.opt_int("head_dim", None)
        if explicit is not None:
            return explicit
        if hidden % heads:
            raise ConfigError(
                f"{self._where()}: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                "and there is no head_dim; add head_dim to the config"
            )
        return hidden // heads

    def kv_heads(self, heads: int) -> int:
        kv = self.opt_int("num_key_value_heads", heads)
        assert kv is not None
        if heads % kv:
            raise ConfigError(
                f"{self._where()}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}; "
                "fix the config"
            )
        return kv

    def dtype(self) -> tuple[DType, str]:
        """Parameter dtype: `torch_dtype` (transformers 4) or `dtype` (transformers 5), else bf16."""
        for key in ("torch_dtype", "dtype"):
            value = self._get(key)
            if value is not _MISSING:
                return parse_dtype(str(value), f"config {key}"), f"config {key}"
        return DType.BFLOAT16, "default: config names no dtype"

    def layer_types(self, layers: int) -> tuple[str, ...] | None:
        types = self.opt_str_list("layer_types")
        if types is not None and len(types) != layers:
            raise ConfigError(
                f"{self._where()}: layer_types has {len(types)} entries but num_hidden_layers is {layers}; fix the config"
            )
        return types
