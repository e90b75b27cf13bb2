"""``bench speed`` on a tiny ViT on CPU: forced decisions are the method's own decisions, the counter agrees
with the decision log per method, rows (one file per point) and their ratios, one-line errors with nothing
written, the report's figure and table, and the ACM Triton path (interpreted) under forced learners."""

import copy
import math
import os

import numpy as np
import pandas as pd
import pytest
import torch

from bench import cli, cost, speed
from bench.report import speed as report_speed

FORCED = ["acm", "moefication", "avit", "early_exit", "cct", "adatape", "act"]
# the tiny timings test mechanics, not speed: they run on a machine the suite itself loads (no quiet wait)
TINY = ["task=imagenet", "arch=tiny", "batch=2", "rounds=1", "min_run_s=0.01", "max_load=1000"]


def _forcer(name, task="imagenet", arch="tiny"):
    _, module, arch, specs = speed.resolve(speed.parse([f"method={name}", f"task={task}", f"arch={arch}"]))
    (_, cls, config), = specs
    torch.manual_seed(0)
    backbone = module.build(arch)
    forcer = cls(config())
    model = forcer.convert(copy.deepcopy(backbone.model), backbone).eval()
    return forcer, model, backbone


def _decisions_taken(name, model):
    """What the method's own log says it executed in the last forward."""
    if name == "acm":
        from methods.acm import modules as M
        return [layer.last_k for layer in M.acm_layers(model)]
    if name == "moefication":
        from methods.moefication.method import moe_layers
        return [layer.last_selected.reshape(-1, layer.last_selected.shape[-1]) for layer in moe_layers(model)]
    if name == "avit":
        return model.last.steps.long()
    if name == "early_exit":
        return model.last_exit
    if name == "adatape":
        return model.last.length
    if name == "act":
        return model.last.steps.long()
    return [(b.last.kv, b.last.q, b.last.ffn) for b in model.blocks]


@pytest.mark.parametrize("name", FORCED)
@pytest.mark.parametrize("fraction", [0.25, 0.75])
def test_forced_decisions_are_executed_and_counted(name, fraction):
    forcer, model, backbone = _forcer(name)
    gen = torch.Generator().manual_seed(1)
    x = backbone.example(3, gen)
    decisions = forcer.draw(model, fraction, 3, backbone, gen)
    with torch.inference_mode():
        forcer.apply(model, decisions)
        with cost.count_macs() as counter:
            model(x)
        logged = forcer.sample_macs(model, x).double()
    taken = _decisions_taken(name, model)
    if name == "cct":
        for (kv, q, ffn), d in zip(taken, decisions):
            assert torch.equal(kv, d.kv) and torch.equal(q, d.q) and torch.equal(ffn, d.ffn)
    elif name in ("acm", "moefication"):
        assert all(torch.equal(t.reshape(d.shape), d) for t, d in zip(taken, decisions))
    else:
        assert torch.equal(taken, decisions)
    assert counter.report.macs / 3 == pytest.approx(float(logged.mean()), rel=1e-6)
    assert counter.report.uncounted == []
    assert 0.0 < forcer.executed_fraction(model, decisions) <= 1.0


@pytest.mark.parametrize("task, name, arch", [("iwslt", "acm", "tiny"), ("iwslt", "moefication", "tiny"),
                                              ("iwslt", "acm", "tiny-narrow"), ("iwslt", "moefication", "tiny-narrow"),
                                              ("commonvoice", "acm", "tiny"), ("commonvoice", "moefication", "tiny"),
                                              ("commonvoice", "avit", "tiny")])
def test_other_task_backbones_count_the_forced_decisions(task, name, arch):
    """Translation (teacher-forced encoder-decoder: the model's cost ledger; also with a decoder narrower
    than the encoder, as the DAT paper's IWSLT model) and CTC speech (per-token head)."""
    forcer, model, backbone = _forcer(name, task, arch)
    gen = torch.Generator().manual_seed(3)
    x = backbone.example(2, gen)
    decisions = forcer.draw(model, 0.5, 2, backbone, gen)
    with torch.inference_mode():
        forcer.apply(model, decisions)
        with cost.count_macs() as counter:
            model(x)
        logged = forcer.sample_macs(model, x).double()
    assert counter.report.macs / 2 == pytest.approx(float(logged.mean()), rel=1e-6)
    assert counter.report.uncounted == []


def test_the_dat_paper_model_has_a_narrower_decoder():
    from tasks.iwslt import speed as iwslt_speed

    backbone = iwslt_speed.build(iwslt_speed.ARCHS["tiny-narrow"])
    assert backbone.model.cfg.d_model == 32 and backbone.model.decoder.blocks[0].attn.q.out_features == 16
    assert iwslt_speed.ARCHS["dat"].decoder.d_model == 256 and iwslt_speed.ARCHS["dat"].encoder.d_model == 512


def test_counts_mean_and_floor():
    g = torch.Generator().manual_seed(0)
    for fraction in (0.25, 0.5, 0.9):
        free = speed.counts((200, 50), 4, fraction, 0, g)
        floored = speed.counts((200, 50), 12, fraction, 1, g)
        assert abs(free.double().mean().item() / 4 - fraction) < 0.02
        assert abs(floored.double().mean().item() / 12 - fraction) < 0.02
        assert int(floored.min()) >= 1 and int(floored.max()) <= 12 and int(free.max()) <= 4
    assert (speed.counts((10,), 12, 0.01, 1, g) == 1).all()  # below the floor: every entry at the floor


@pytest.fixture(scope="module")
def speed_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("speed")
    assert cli.main(["speed", "method=" + ",".join(FORCED), *TINY, "fraction=0.25,1",
                     f"results_dir={out}"]) == 0
    return out


def test_rows_one_file_per_point(speed_rows):
    runs = list((speed_rows / "speed").iterdir())
    assert len(runs) == 1
    files = sorted(p.name for p in runs[0].glob("*.csv"))
    assert files == sorted(["dense_f1.csv"] + [f"{m}_f{f}.csv" for m in (*FORCED, *speed.IDEALS)
                                               for f in ("0.25", "1")])
    rows = speed.load_rows(speed_rows)
    assert list(rows.columns) == speed.COLUMNS and (rows["status"] == "ok").all()
    dense = rows[rows["method"] == "dense"].iloc[0]
    assert dense["time_ratio"] == 1.0 and dense["macs_ratio"] == 1.0
    assert rows["speed_efficiency"].to_numpy() == pytest.approx((rows["macs_ratio"] / rows["time_ratio"]).to_numpy())
    assert rows["macs_per_sample"].to_numpy() == pytest.approx(rows["macs_counted_per_sample"].to_numpy(), rel=1e-6)
    assert (rows["loadavg_1m"].astype(str).str.len() > 0).all() and (rows["threads"] == 1).all()
    rounds = rows["other_cpus"].astype(str).str.split(";")  # one reading per round, their mean beside them
    assert (rounds.str.len() == rows["rounds"]).all() and rows["other_cpus_mean"].ge(0).all()
    assert rows["other_cpus_mean"].to_numpy() == pytest.approx([np.mean([float(v) for v in r]) for r in rounds],
                                                               abs=1e-3)
    for method in FORCED:
        sub = rows[rows["method"] == method].set_index("fraction")
        assert sub.loc[0.25, "macs_ratio"] < sub.loc[1.0, "macs_ratio"]
    assert not pd.isna(rows["git_sha"]).any() and rows["command"].str.startswith("python -m bench speed").all()
    # the aligned narrow dense ideal: tiny's MLP (128) at f = 0.25 rounds to one tile of 64; at f = 1 it is dense
    narrow = rows[rows["method"] == speed.NARROW].set_index("fraction")
    assert narrow.loc[0.25, "executed_fraction"] == 0.5 and narrow.loc[0.25, "macs_ratio"] < 1.0
    assert narrow.loc[1.0, "macs_ratio"] == pytest.approx(1.0)
    # the fewer-tokens dense ideal: tiny's 17 tokens at f = 0.25 keep round(4.25) = 4 (the patch embedding still
    # runs on every patch, so the MACs stay above the token fraction); at f = 1 it is dense
    short = rows[rows["method"] == speed.SHORT].set_index("fraction")
    assert short.loc[0.25, "executed_fraction"] == pytest.approx(4 / 17)
    assert 4 / 17 < short.loc[0.25, "macs_ratio"] < 1.0 and short.loc[1.0, "macs_ratio"] == pytest.approx(1.0)


def test_aligned_width_and_narrowed_arch():
    assert speed.aligned_width(0.9, 3072) == 2752 and speed.aligned_width(1.0, 3000) == 3000
    assert speed.aligned_width(0.5, 3072) == 1536 and speed.aligned_width(0.01, 3072) == 0
    arch = speed.SpeedArch("x", speed.Stack(768, 12, 12, 3072), speed.Stack(512, 6, 8, 2048), length=1)
    small = speed.narrowed(arch, 0.3)
    assert (small.encoder.mlp, small.decoder.mlp) == (896, 640)  # 921.6 -> 896, 614.4 -> 640
    assert small.encoder.d_model == 768 and small.decoder.layers == 6
    assert speed.narrowed(arch, 0.0).encoder.mlp == 64  # at least one tile
    assert speed.narrowed(speed.SpeedArch("y", speed.Stack(32, 2, 2, 48)), 0.0).encoder.mlp == 48


def test_narrow_and_short_false_time_no_ideal(tmp_path):
    assert cli.main(["speed", "method=acm", *TINY, "fraction=0.5", "narrow=false", "short=false",
                     f"results_dir={tmp_path}"]) == 0
    assert set(speed.load_rows(tmp_path)["method"]) == {"dense", "acm"}


def test_kept_tokens():
    assert [speed.kept_tokens(f, 197) for f in (0.25, 0.5, 0.75, 1.0)] == [49, 99, 148, 197]
    assert speed.kept_tokens(0.0, 17) == 1 and speed.kept_tokens(2.0, 17) == 17


def test_short_model_shares_the_dense_weights_and_cuts_only_the_tokens():
    from tasks.imagenet import speed as imagenet_speed

    backbone = imagenet_speed.build(imagenet_speed.ARCHS["tiny"])
    dense = backbone.model.eval()
    embed = dense.embed
    x = backbone.example(2, torch.Generator().manual_seed(0))
    short = speed.short_model(dense, 4)
    assert short.blocks is dense.blocks and short.head is dense.head and dense.embed is embed
    assert [p.data_ptr() for p in short.parameters()] == [p.data_ptr() for p in dense.parameters()]
    with torch.inference_mode():
        features, _ = short.features(x)
        assert features.shape[1] == 4 and dense.features(x)[0].shape[1] == backbone.tokens
        assert torch.equal(speed.short_model(dense, backbone.tokens)(x), dense(x))  # every token kept: dense
        cfg = speed.parse(["method=acm", *TINY, "fraction=0.25,1"])
        points = speed._short_points(cfg, backbone, x, 1.0, log=lambda line: None)
    assert [p.fields["executed_fraction"] for p in points] == pytest.approx([4 / 17, 1.0])


def test_short_ideal_skips_an_encoder_decoder():
    lines = []
    points, _, _ = speed.prepare(speed.parse(["method=acm", "task=iwslt", "arch=tiny", "batch=1", "rounds=1",
                                              "fraction=0.5", "narrow=false", "max_load=1000"]), [], lines.append)
    assert {p.method for p in points} == {"dense", "acm"}
    assert any(line.startswith(f"{speed.SHORT}: skipped") for line in lines)


def _as_timed(speed_rows, root, *, load: float, dirty: bool):
    """A copy of the speed rows as if timed at a given load from a clean or dirty tree (the suite's own
    timings ran on a machine it loads): the load average decides, as in rows without ``other_cpus``."""
    import shutil

    shutil.copytree(speed_rows / "speed", root / "speed")
    for path in (root / "speed").rglob("*.csv"):
        rows = pd.read_csv(path)
        rows = rows.assign(git_dirty=dirty, cpus=2, load_before=load, load_after=load,
                           loadavg_1m=";".join([f"{load:.2f}"] * 2), other_cpus=math.nan, other_cpus_mean=math.nan)
        rows.to_csv(path, index=False)
    return root


def test_report_draws_figure_and_table(speed_rows, tmp_path):
    quiet = _as_timed(speed_rows, tmp_path / "quiet", load=0.5, dirty=False)
    kernels = quiet / "kernels"
    kernels.mkdir(exist_ok=True)
    pd.DataFrame([{"run_id": "k1", "device_name": "cpu: test", "dtype": "fp32", "batch": 2, "variant": "acm_sorted",
                   "baseline": "dense_eager", "statistic": "median", "k_mode": "iid", "intercept": 0.1,
                   "slope": 0.9, "r2": 0.99}]).to_csv(kernels / "k1.fit.csv", index=False)
    assert report_speed.kernel_fit(quiet, "cpu", 1)["slope"] == 0.9
    assert report_speed.kernel_fit(quiet, "cuda", 1) is None
    written = report_speed.write(quiet, tmp_path)
    assert sorted(os.path.basename(p) for p in written) == ["speed.md", "speed_cpu_b2.png"]
    text = (tmp_path / "speed.md").read_text()
    assert "| cpu | 2 | imagenet | tiny | fp32 | 1 | eager | acm | 0.25 |" in text and "Kept apart" not in text
    assert report_speed.write(tmp_path / "none", tmp_path / "none_reports") == []


def test_efficiency_at_half_with_its_interval():
    """The f = 0.5 table: an efficiency whose whole interval clears 0.9 reaches it, one whose interval
    straddles it is inconclusive, one wholly below does not; the interval is the MACs ratio over the time
    ratio's bounds."""
    base = {"task": "imagenet", "arch": "b16", "dtype": "fp32", "threads": 1, "cuda_graph": False,
            "fraction": 0.5, "executed_fraction": 0.5, "macs_ratio": 0.5}
    rows = pd.DataFrame([
        {**base, "method": "a", "time_ratio": 0.52, "time_ratio_rounds": "0.5200;0.5210;0.5190;0.5205"},
        {**base, "method": "b", "time_ratio": 0.555, "time_ratio_rounds": "0.5000;0.5550;0.6000;0.5600"},
        {**base, "method": "c", "time_ratio": 0.70, "time_ratio_rounds": "0.7000;0.7010;0.6990;0.7005"},
        {**base, "method": "dense", "fraction": 1.0, "time_ratio": 1.0, "time_ratio_rounds": "1;1"}])
    rows["speed_efficiency"] = rows["macs_ratio"] / rows["time_ratio"]
    lines = report_speed.at_half(rows)
    verdicts = {line.split("|")[4].strip(): line.split("|")[-2].strip() for line in lines[2:]}
    assert verdicts == {"a": "yes", "b": "inconclusive", "c": "no"}
    low, high = report_speed.efficiency_ci(rows.iloc[2])
    assert low < 0.5 / 0.70 < high and high - low < 0.01


def test_loaded_or_dirty_speed_rows_stay_out_of_the_headline(speed_rows, tmp_path):
    for name, load, dirty in (("loaded", 3.5, False), ("dirty", 0.5, True)):
        root = _as_timed(speed_rows, tmp_path / name, load=load, dirty=dirty)
        written = report_speed.write(root, tmp_path / f"{name}_reports")
        assert [os.path.basename(p) for p in written] == ["speed.md"]  # no headline figure
        text = (tmp_path / f"{name}_reports" / "speed.md").read_text()
        headline, apart = text.split("### Kept apart", 1)
        assert "| acm |" not in headline and "| acm |" in apart and "No quiet row" in headline


def test_a_later_loaded_timing_is_listed_apart_and_keeps_the_quiet_one_in_the_headline(speed_rows, tmp_path):
    """A point timed quietly and later on a loaded machine: the headline keeps the quiet row, the loaded
    one is listed apart; a point whose only row is loaded is apart only."""
    root = _as_timed(speed_rows, tmp_path / "rows", load=0.5, dirty=False)
    later = pd.read_csv(next((root / "speed").rglob("acm_f0.25.csv")))
    later = later.assign(timestamp="2099-01-01T00:00:00Z", run_id="later", loadavg_1m="3.50;3.50",
                         time_ratio=later["time_ratio"] * 3)
    (root / "speed" / "later").mkdir()
    later.to_csv(root / "speed" / "later" / "acm_f0.25.csv", index=False)
    shown = report_speed.latest(speed.load_rows(root))
    acm = shown[(shown["method"] == "acm") & (shown["fraction"] == 0.25)]
    assert sorted(acm["_why"].str[:6]) == ["", "loaded"] and "later" in set(acm["run_id"])
    assert (shown["_why"] == "").sum() == len(shown) - 1  # every other point: its quiet row only
    report_speed.write(root, tmp_path / "reports")
    headline, apart = (tmp_path / "reports" / "speed.md").read_text().split("### Kept apart", 1)
    assert "| acm | 0.25 |" in headline and "| acm | 0.25 |" in apart and "1 rows" in apart


def test_counter_disagreement_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from methods.moefication.speed import MoeficationForcer

    real = MoeficationForcer.sample_macs
    monkeypatch.setattr(MoeficationForcer, "sample_macs", lambda self, m, x: real(self, m, x) * 1.05)
    assert cli.main(["speed", "method=moefication", *TINY, "fraction=0.5", f"results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench: error: speed: moefication f=0.5") and "disagree" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "speed").exists()


@pytest.mark.parametrize("bad, message", [
    (["bogus=1"], "unknown config key 'bogus'"), (["fraction=1.5"], "fraction=1.5 is out of range; expected <= 1.0"),
    (["batch=0"], "batch=0 is out of range; expected >= 1"), (["fraction=[]"], "fraction= is empty"), (["method=dense"], "defines no speed forcer"),
    (["arch=b17"], "has no arch 'b17'"), (["task=parity"], "defines no speed backbones"),
    (["task=commonvoice", "method=cct"], "does not apply to task commonvoice"),
    (["device=tpu"], "device='tpu' is not allowed; choose one of cpu, cuda"), (["rounds=x"], "rounds: expected integer, got 'x'"),
    (["narrow=maybe"], "narrow: expected true or false, got 'maybe'"), (["methd=acm"], "did you mean method"),
    (["fraction"], "expected key=value, got 'fraction'")])
def test_bad_input_one_line(tmp_path, capsys, bad, message):
    """Every bad key, value or form ends in one line (Hydra's errors included) and writes nothing."""
    assert cli.main(["speed", *TINY, *bad, f"results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench: error: speed: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "speed").exists()


def test_acm_triton_path_under_forced_learners(monkeypatch):
    """The CUDA path of an ACM (the Triton kernel, interpreted on CPU) runs exactly the forced learners:
    same output as the sorted path, and the counter (through the operator's formula) equals the log."""
    from methods.acm.kernels.acm_torch import triton_available
    from methods.acm import modules as M

    if not triton_available():
        pytest.skip("Triton needs a GPU or TRITON_INTERPRET=1")
    from methods.acm.kernels.acm_ops import acm_triton

    forcer, model, backbone = _forcer("acm")
    gen = torch.Generator().manual_seed(2)
    x = backbone.example(1, gen)
    decisions = forcer.draw(model, 0.5, 1, backbone, gen)
    with torch.inference_mode():
        forcer.apply(model, decisions)
        sorted_out = model(x)
        monkeypatch.setattr(M, "real_kernel", lambda device, differentiable=False: acm_triton)
        with cost.count_macs() as counter:
            triton_out = model(x)
        logged = float(forcer.sample_macs(model, x).double().mean())
    torch.testing.assert_close(triton_out, sorted_out, rtol=1e-4, atol=1e-4)
    assert counter.report.macs == pytest.approx(logged, rel=1e-6) and not math.isnan(logged)


def test_speed_waits_for_a_quiet_machine_then_refuses_in_one_line():
    from bench.errors import UserError
    from bench.speed import wait_until_quiet

    loads = iter([3.5, 2.5, 1.5])
    slept, said = [], []
    assert wait_until_quiet(2.0, 60, said.append, loadavg=lambda: next(loads), sleep=slept.append) == 1.5
    assert slept == [10.0, 10.0] and said == ["load 3.50 > 2: waiting up to 60 s for a quiet machine"]
    with pytest.raises(UserError, match=r"^speed: the 1-minute load average is 4.00, above max_load=2 "):
        wait_until_quiet(2.0, 20, said.append, loadavg=lambda: 4.0, sleep=lambda s: None)
    with pytest.raises(UserError):
        wait_until_quiet(2.0, 0, said.append, loadavg=lambda: 2.5, sleep=lambda s: None)


def test_the_speed_page_headline_holds_no_loaded_dirty_or_uncounted_rows(tmp_path):
    import pandas as pd

    from bench.report import speed as report_speed

    base = {"device": "cpu", "git_dirty": False, "cpus": 2, "loadavg_1m": "0.50;0.70", "load_before": 0.4,
            "load_after": 0.6}
    assert report_speed.not_headline(pd.Series(base)) == ""
    assert report_speed.not_headline(pd.Series({**base, "git_dirty": True})) == "timed from a dirty tree"
    assert report_speed.not_headline(pd.Series({**base, "loadavg_1m": "0.5;4.70"})) == (
        "loaded: 1-minute load average 2.60 mean over the rounds on 2 CPUs")
    # a round just above the CPU count (a two-thread timing's own threads on 2 CPUs) with a mean below it is quiet
    assert report_speed.not_headline(pd.Series({**base, "loadavg_1m": "1.90;2.06;1.85"})) == ""
    assert report_speed.not_headline(pd.Series({**base, "load_after": 2.5})) == (
        "loaded: 1-minute load average 2.50 after on 2 CPUs")
    assert report_speed.not_headline(pd.Series({**base, "load_before": 3.0, "loadavg_1m": "2.5;2.5"})) == (
        "loaded: 1-minute load average 3.00 before, 2.50 mean over the rounds on 2 CPUs")
    assert report_speed.not_headline(pd.Series({**base, "cpus": float("nan")})).startswith("CPU count not recorded")
    assert report_speed.not_headline(pd.Series({**base, "device": "cuda", "cpus": float("nan")})) == ""
    # where the rows hold the CPUs other processes kept busy, that decides, not the lagging load average
    assert report_speed.not_headline(pd.Series({**base, "load_before": 3.0, "other_cpus_mean": 0.04})) == ""
    assert report_speed.not_headline(pd.Series({**base, "other_cpus_mean": 0.97})) == (
        "loaded: other processes kept 0.97 CPUs busy during the timings (more than 0.25)")
    assert report_speed.not_headline(pd.Series({**base, "load_after": 2.5, "other_cpus_mean": float("nan")})) == (
        "loaded: 1-minute load average 2.50 after on 2 CPUs")  # no reading: the load average decides


def test_keys_compose_through_hydra_in_both_list_forms():
    """``bench speed``'s keys are a Hydra scenario: list keys take ``a,b``, a single value or Hydra's ``[a,b]``;
    values are typed by the schema; defaults fill the rest."""
    comma = speed.parse(["method=acm,moefication", "fraction=0.25,0.5", "batch=32", "narrow=false"])
    brackets = speed.parse(["method=[acm,moefication]", "fraction=[0.25,0.5]", "batch=32", "narrow=false"])
    assert comma == brackets
    assert comma.method == ["acm", "moefication"] and comma.fraction == [0.25, 0.5] and comma.batch == 32
    assert comma.narrow is False and comma.rounds == speed.SpeedConfig().rounds
    one = speed.parse(["method=cct", "fraction=0.5"])
    assert one.method == ["cct"] and one.fraction == [0.5]
