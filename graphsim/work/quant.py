"""Checkpoint weight quantization for the accountant: the one model in `graphsim.quantization`.

Kept as the accountant's import point; the parser, the schemes and their stored bytes live in
`graphsim.quantization` (torch-free), which the fuse pass, costing and the kv budget read too.
"""

from graphsim.quantization import (
    Granularity, Quantization, WeightFormat, WeightScheme, matches, parse_quant_config, parse_quantization,
)

__all__ = ["Granularity", "Quantization", "WeightFormat", "WeightScheme", "matches", "parse_quant_config",
           "parse_quantization"]
