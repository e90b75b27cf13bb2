"""scripts/speed_profile.py: a speed point's time by operator kind beside its MACs, its shortfall from a
perfect saving split by kind."""

from __future__ import annotations

import re

import pytest

from helpers import load_script


@pytest.mark.parametrize("name, kind", [
    ("aten::addmm", "matmul"), ("aten.addmm_.default", "matmul"), ("aten.mm", "matmul"), ("aten::mm", "matmul"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"), ("aten::bmm", "attention"),
    ("aten::_softmax", "attention"), ("aten::index_select", "data movement"), ("aten::copy_", "data movement"),
    ("aten::native_layer_norm", "norm"), ("aten::gelu", "activation"), ("aten.convolution", "convolution"),
    ("aten::mkldnn_convolution", "convolution"), ("aten::add", "rest"), ("aten::mmap_like", "rest"),
])
def test_operator_kinds(name, kind):
    assert load_script("speed_profile").kind_of(name) == kind


def test_profiles_tiny_points_and_the_excesses_add_up(capsys):
    speed_profile = load_script("speed_profile")
    assert speed_profile.main(["method=acm,early_exit", "arch=tiny", "batch=2", "fraction=0.5", "max_load=1000",
                               "--calls", "1", "--top", "3"]) == 0
    out = capsys.readouterr().out
    for method in ("acm", "early_exit"):
        section = out.split(f"### {method} f=0.5")[1].split("###")[0]
        rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ")][1:]
        kinds = {cells[0].strip(): [float(c.strip().rstrip("%")) for c in cells[1:6]] for cells in rows}
        total = kinds.pop("total")
        # method ms and excess: the kinds add up to the total (rounding to 2 decimals per cell)
        assert sum(v[2] for v in kinds.values()) == pytest.approx(total[2], abs=0.01 * len(kinds) + 1e-9)
        assert sum(v[4] for v in kinds.values()) == pytest.approx(total[4], abs=0.01 * len(kinds) + 1e-9)
        assert kinds["matmul"][3] > 0 and total[1] > 0  # MACs counted and attributed
        efficiency = float(re.search(r"efficiency (\d\.\d\d)", section).group(1))
        assert 0 < efficiency < 5
        assert "heaviest operators" in section and section.count("\n- aten::") == 3


def test_a_bad_key_is_one_line(capsys):
    speed_profile = load_script("speed_profile")
    assert speed_profile.main(["methd=acm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("speed_profile: ") and err.count("\n") == 1 and "methd" in err
