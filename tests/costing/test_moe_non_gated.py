"""Non-gated routed experts (Nemotron-H's relu², vLLM FusedMoE activation="relu2_no_mul": w1 [E, inter, hidden])
are two matrices, not three: the roofline's FLOPs and bytes, and times from the (gated-only) MoE tables' rows
scaled by the work ratio (costing/moe_variants.py). Expected values are derived by hand in the comments."""

import numpy as np
import pytest

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.interpolate import SOURCES, KernelPricer
from graphsim.costing.kernels import Measurement, MoeKey, TableKind, TokensPoint
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.costing.roofline import kernel_work
from graphsim.costing.schema import TABLES
from graphsim.costing.timing import TimeSource

GATED = MoeKey(64, 32, 2, 8, 1, 1, D.BF16)
PLAIN = MoeKey(64, 32, 2, 8, 1, 1, D.BF16, gated=False)


def test_non_gated_experts_do_two_matrices_of_work():
    # 10 tokens × top-2 = 20 token-expert pairs; per pair 2 FLOPs × hidden 64 × inter 32 per matrix:
    # gated 3 matrices 2·20·3·64·32 = 245,760; non-gated 2 matrices 2·20·2·64·32 = 163,840
    g, p = kernel_work(GATED, np.array([[10]])), kernel_work(PLAIN, np.array([[10]]))
    assert g is not None and p is not None
    assert g.flops[0] == 245_760 and p.flops[0] == 163_840
    # bytes: touched experts 8·(1 − (7/8)^20) = 7.5770…, weights per expert 3 (2) · 64·32·2 B, activations
    # 20 pairs · (2·64 + 3 (2)·32) · 2 B
    touched = 8 * (1 - (7 / 8) ** 20)
    assert g.bytes[0] == pytest.approx(touched * 3 * 64 * 32 * 2 + 20 * (128 + 96) * 2)
    assert p.bytes[0] == pytest.approx(touched * 2 * 64 * 32 * 2 + 20 * (128 + 64) * 2)


def test_gated_is_no_table_column_and_non_gated_keys_scale_the_gated_rows(tmp_path):
    assert "gated" not in [c.name for c in TABLES[TableKind.MOE].key_columns]
    path = tmp_path / "p.db"
    with ProfileDB.create(path, ProfileMeta(device="cpu: test", hardware="h100_sxm", engine="torch-eager")) as db:
        db.put_many([(GATED, TokensPoint(t), Measurement(5.0 + t)) for t in (1, 16, 256)])
    with ProfileDB.open(path) as db:
        assert db.keys(TableKind.MOE) == [GATED]  # read back as gated (the default)
        pr = KernelPricer(db)
        measured = pr.time(GATED, TokensPoint(16))
        assert measured.source is TimeSource.MEASURED and measured.time_us == 21.0
        # 16 tokens: 32 pairs, touched experts 8·(1 − (7/8)^32) = 7.888; FLOPs ratio 2/3, bytes ratio
        # (7.888·2·64·32·2 + 32·(128 + 64)·2) / (7.888·3·64·32·2 + 32·(128 + 96)·2) = 76,910 / 111,270 = 0.691
        # (the larger): 21 µs × 0.691 = 14.5 µs, derived
        touched = 8 * (1 - (7 / 8) ** 32)
        ratio = (touched * 2 * 64 * 32 * 2 + 32 * 192 * 2) / (touched * 3 * 64 * 32 * 2 + 32 * 224 * 2)
        plain = pr.time(PLAIN, TokensPoint(16))
        assert plain.source is TimeSource.DERIVED and plain.time_us == pytest.approx(21.0 * ratio)
        assert plain.time_us == pytest.approx(14.51, abs=0.01)
        t, s = pr.times(PLAIN, np.array([[1], [16], [256]]))  # every row's time × a ratio in (2/3, 1)
        assert np.all(t < np.array([6.0, 21.0, 261.0])) and np.all(t > 2 / 3 * np.array([6.0, 21.0, 261.0]))
        assert [SOURCES[i] for i in s] == [TimeSource.DERIVED] * 3
