"""The results schema, atomic row files, and loading them as one pandas DataFrame.

Layout::

    results/<task>/<method>/<row_id>.csv            one row (one run × one knob value)
    results/<task>/<method>/<row_id>.samples.csv.gz per-sample predictions, correctness and MACs
    results/<task>/<method>/<row_id>.config.yaml    the run's resolved config
    results/kernels/<row_id>.csv                    kernel benchmark rows (their own schema)
    results/speed/<run_id>/<point>.csv              `bench speed` rows (their own schema, bench/speed.py)

Each file is written to a temporary name in the same directory and renamed into place (``os.replace``
is atomic on POSIX), so two concurrent runs never clobber each other and an interrupted run leaves no
half-written row.  Row ids are unique per (config hash, knob value, seed).  Reports read only these files.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from bench import registry
from bench.errors import DISK_FULL_ERRNOS, disk_full

SCHEMA_VERSION = 8  # 2: same-process dense timing ratios and the cost check; 3: load average, code version;
# 4: the training protocol's version; 5: precision, compute dtypes of the counter and the timer, world size
# (rows without these columns: fp32, one process); 6: base_train_time_s, and train_time_s without the base's
# time for a method that fine-tunes it; 7: val_quality and val_n (the task's validation split), recipe,
# train_samples and base_train_samples (rows without them: recipe matched, compute not recorded); 8:
# timing_other_cpus (rows without it: the load average tells quiet from loaded)
# The training protocol a row's model was trained under: 1 = each method's own budget, data order and seeds
# (rows without this column); 2 = stages run by the core (bench/protocol.py: one method budget, data
# continuing after the base model, per-step seeds).  Reports never join rows of two versions in one curve.
PROTOCOL_VERSION = 2
# Other processes keeping more than this many CPUs busy on average while a value is timed (the row's
# ``timing_other_cpus``) make its timing noise: a quiet machine's daemons keep a few hundredths busy, another
# one-thread training about 1.
BUSY_OTHER_CPUS = 0.25
FILE_MODE = 0o644  # mkstemp creates 0600; result files are meant to be read by everyone

# Run-level keys that cannot change a row's quality, cost or samples: they never enter the config hash
# (a point's identity).  timing_rounds / timing_min_run_s only make the timing more or less precise;
# allow_cost_mismatch only labels a row whose numbers are the same either way; threads and train_threads
# change neither the trained model (no cache key holds them) nor its quality, and a row records the thread count it was timed with
# (timing_threads), which the report keeps apart.  Rows written before a key
# was listed here keep the hash they were written with (their row id); :func:`identity_hash` recomputes
# every row's identity from its stored ``<row_id>.config.yaml`` with the current list, so an old row and
# a new row of the same point have the same identity although their stored hashes differ.
NON_RESULT_KEYS = frozenset({"results_dir", "cache_dir", "force", "shipped", "plugins", "threads", "train_threads",
                             "timing_min_run_s", "timing_rounds", "allow_cost_mismatch", "num_workers", "pin_memory", "log_every",
                             "save_every_s"})
# Text columns that pandas would otherwise parse as numbers (a hex hash such as "852181e88326" is a float).
TEXT_COLUMNS = ("config_hash", "run_id", "git_sha", "knob_value", "variant", "code_version")


@dataclass
class ResultRow:
    """One evaluation point.  Costs are MACs per sample (GFLOPs in the vision sense = GMACs)."""

    # identity
    method: str
    task: str
    dataset: str  # the dataset actually used, e.g. "fashion-mnist (debian dataset-fashion-mnist)"
    knob_name: str
    knob_value: str
    knob_kind: str  # "eval" | "train" | "static"
    seed: int
    variant: str  # method variant notes that change results (e.g. gate gradient path)
    # quality
    metric: str
    quality: float
    higher_is_better: bool
    metric_signature: str
    n_eval: int
    # cost (per sample)
    macs_mean: float
    macs_p10: float
    macs_p50: float
    macs_p90: float
    macs_dense: float  # the task's dense base model, same data
    cost_pct_dense: float
    macs_counted_mean: float  # dispatch-level counter on the real path (must agree with macs_mean)
    cost_check: str  # "agree" (counter = decision log within 1%) or the overridden disagreement
    uncounted_ops: str
    # timing (absolute numbers drift between runs on a shared machine: compare the ratios)
    latency_b1_ms: float
    latency_b1_iqr_ms: float
    throughput_per_s: float
    throughput_batch: int
    timing_threads: int
    # the task's dense base model timed in the same process, interleaved with the method (bench/timing.py)
    dense_latency_b1_ms: float
    dense_throughput_per_s: float
    latency_b1_ratio: float  # method / dense batch-1 latency (< 1 = faster)
    throughput_ratio: float  # method / dense throughput (> 1 = faster)
    timing_rounds: int
    # size and training
    params: int
    train_budget: str
    # wall seconds of the row's own training stages (cached ones count theirs); a method that fine-tunes the
    # dense base does not count the base here (schema < 6 did), the dense base's own row does; never the dense
    # base a static size's run loads as its timing reference
    train_time_s: float
    # provenance
    run_id: str
    config_hash: str
    command: str
    git_sha: str
    git_dirty: bool | None  # None (empty in the file) when git could not tell: bench/provenance.py
    versions: str
    device: str
    timestamp: str
    schema_version: int = SCHEMA_VERSION
    extra_metrics: str = ""  # further corpus-level metrics of the same evaluation, "name=value;..." (e.g. cer)
    # 1-minute load average and CPU count read just before this row's timing phase (schema 3; NaN before):
    # the report flags ratios timed with load > CPUs and never mixes them with quiet ones
    timing_load_avg: float = float("nan")
    timing_cpus: int = 0
    # the behaviour versions of the code that made the row's model (bench/versions.py, e.g.
    # "skeleton1.trainer1.imagenet1.acm1"); a 12-hex hash of source files in older rows; "" before schema 3
    code_version: str = ""
    protocol: int = PROTOCOL_VERSION
    # scale: the run's precision (training autocast), the dtype the MAC counter and the timer ran
    # under (evaluation too), and the number of data-parallel training processes
    precision: str = "fp32"
    count_dtype: str = "float32"
    timing_dtype: str = "float32"
    world_size: int = 1
    # wall seconds of the dense base the row's model starts from (NaN when it starts from scratch; schema 6)
    base_train_time_s: float = float("nan")
    # the same metric on the task's validation split and its size (NaN / 0: the task has none; schema 7): what
    # the report selects (a method's front) is chosen on it and read on ``quality``
    val_quality: float = float("nan")
    val_n: int = 0
    # the training recipe (``matched``: the harness's equal budget; ``paper``: the method's paper recipe) and the
    # training compute of the row's own stages: optimizer steps x batch (samples), and of the base it starts from
    recipe: str = "matched"
    train_samples: int = 0
    base_train_samples: int = 0
    # the CPUs other processes kept busy on average while the row's value was timed (bench/timing.py OtherCpus;
    # schema 8, NaN before and where unmeasured): the report's quiet/loaded test where it is there
    timing_other_cpus: float = float("nan")


COLUMNS = [f.name for f in dataclasses.fields(ResultRow)]


def _staged(path: Path, write: Callable[[str], None]) -> str:
    """Write ``path``'s content into a temporary file beside it with ``write(tmp)``; returns the temporary
    file's name (nothing is left behind if the write fails; a full device is a one-line UserError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, FILE_MODE)
    try:
        write(tmp)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            raise disk_full(path) from None
        raise
    return tmp


def _text_writer(text: str) -> Callable[[str], None]:
    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    return write


def _frame_writer(path: Path, frame) -> Callable[[str], None]:
    compression = "gzip" if path.name.endswith(".gz") else None
    return lambda tmp: frame.to_csv(tmp, index=False, compression=compression)


def atomic_write_files(writes: list[tuple[Path, Callable[[str], None]]]) -> None:
    """Write several files all or none: every content is staged in a temporary file first, then each is
    renamed into place (a rename needs no space); if any staging fails, no file is touched."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, write in writes:
            staged.append((_staged(path, write), path))
    except BaseException:
        for tmp, _ in staged:
            os.unlink(tmp)
        raise
    for tmp, path in staged:
        os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_files([(path, _text_writer(text))])


def atomic_write_frame(path: Path, frame) -> None:
    """Write a DataFrame as CSV (gzip if the name ends in .gz) atomically."""
    atomic_write_files([(path, _frame_writer(path, frame))])


def row_dir(results_dir: Path | str, task: str, method: str) -> Path:
    return Path(results_dir) / task / method


def row_path(results_dir: Path | str, row: ResultRow, row_id: str) -> Path:
    return row_dir(results_dir, row.task, row.method) / f"{row_id}.csv"


def append(results_dir: Path | str, row: ResultRow, row_id: str, samples=None, config_yaml: str = "") -> Path:
    """Write one row atomically, after its per-sample table and resolved config (so a row never lacks them)."""
    import pandas as pd

    path = row_path(results_dir, row, row_id)
    writes = []
    if config_yaml:
        writes.append((path.with_name(f"{row_id}.config.yaml"), _text_writer(config_yaml)))
    if samples is not None:
        samples_path = path.with_name(f"{row_id}.samples.csv.gz")
        writes.append((samples_path, _frame_writer(samples_path, samples)))
    writes.append((path, _frame_writer(path, pd.DataFrame([dataclasses.asdict(row)], columns=COLUMNS))))
    atomic_write_files(writes)  # the row is renamed into place last
    return path


def exists(results_dir: Path | str, task: str, method: str, row_id: str) -> bool:
    return (row_dir(results_dir, task, method) / f"{row_id}.csv").exists()


def stable_hash(obj: Any, length: int = 12) -> str:
    """SHA-256 of the JSON form of ``obj`` (sorted keys): the hash ``bench.run.stable_hash`` computes, here
    without torch so that the report can recompute row identities (a test checks that the two agree)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:length]


# Result keys added after rows existed, with the value those rows implicitly had: a key at that value is left
# out of the hash, so a point run with the defaults keeps the identity of its older rows.
IMPLICIT_DEFAULTS = {"precision": "fp32", "accumulate": 1, "recipe": "matched"}


# Task-section keys added after rows were written, at the value that keeps the behaviour before them: a
# config that holds the key at that value is the point a config without the key was, so the key is left
# out of the identity (and of the settings a report compares).  Keys of several tasks are listed here; a
# key of one task is declared by that task (``TaskSpec.added_defaults``).
ADDED_TASK_DEFAULTS: dict[str, Any] = {"streaming": False}


def without_added_defaults(config: dict[str, Any], task: str) -> dict[str, Any]:
    """``config`` without the task-section keys added later (:data:`ADDED_TASK_DEFAULTS` and the task's own
    ``added_defaults``) at those values."""
    section = config.get(task)
    if not isinstance(section, dict):
        return config
    added = {**ADDED_TASK_DEFAULTS, **registry.added_task_defaults(task)}
    return {**config, task: {k: v for k, v in section.items() if not (k in added and v == added[k])}}


def identity_hash(config: dict[str, Any], method: str, task: str) -> str:
    """The config hash of a point: the resolved config without :data:`NON_RESULT_KEYS` (and without
    :data:`IMPLICIT_DEFAULTS`, :data:`ADDED_TASK_DEFAULTS` or the task's declared ``added_defaults`` at their
    defaults), with method and task."""
    return stable_hash({"method": method, "task": task,
                        **{k: v for k, v in without_added_defaults(config, task).items() if k not in NON_RESULT_KEYS
                           and not (k in IMPLICIT_DEFAULTS and v == IMPLICIT_DEFAULTS[k])}})


def stored_identity(csv_path: Path, method: str, task: str, stored_hash: str) -> str:
    """The identity hash of a stored row, recomputed from its ``<row_id>.config.yaml`` with today's
    :data:`NON_RESULT_KEYS` (the stored hash when the row has no config file)."""
    import yaml

    config = csv_path.with_name(csv_path.name[:-len(".csv")] + ".config.yaml")
    if not config.exists():
        return str(stored_hash)
    return identity_hash(yaml.load(config.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)),
                         method, task)


def protocol_version(value: Any) -> int:
    """A row's training-protocol version from its ``protocol`` cell: 1 when the cell is missing or empty
    (rows made before the column existed)."""
    return 1 if value is None or value != value or value == "" else int(value)


def row_protocol(csv_path: Path) -> int:
    """The training-protocol version a stored row was made under (:func:`protocol_version`; 1 for a file
    with no row, which a re-run then replaces)."""
    import pandas as pd

    frame = pd.read_csv(csv_path, usecols=lambda c: c == "protocol")
    return protocol_version(frame["protocol"].iloc[0] if "protocol" in frame and len(frame) else None)


def row_code_version(csv_path: Path) -> str:
    """The ``code_version`` a stored row was made by ("" for a file without one)."""
    import pandas as pd

    frame = pd.read_csv(csv_path, usecols=lambda c: c == "code_version", dtype=str)
    if "code_version" not in frame or not len(frame) or pd.isna(frame["code_version"].iloc[0]):
        return ""
    return str(frame["code_version"].iloc[0])


def made_by_other_versions(stored: str, current: str) -> bool:
    """Whether a row's ``code_version`` names explicit versions other than ``current`` (a behaviour version
    was bumped since it was made).  Rows from before explicit versions (a source hash, or nothing) name no
    versions and keep counting, as their identity does."""
    return stored.startswith("skeleton") and stored != current


def same_point_rows(results_dir: Path | str, task: str, method: str, suffix: str) -> list[Path]:
    """Row files of one method and task whose id ends in ``suffix`` ("-<knob><value>-s<seed>"), any hash."""
    return sorted(p for p in row_dir(results_dir, task, method).glob(f"*{suffix}.csv") if not p.name.startswith("."))


def _row_files(results_dir: Path) -> Iterable[Path]:
    for path in sorted(results_dir.glob("*/*/*.csv")):
        if path.parent.parent.name not in ("kernels", "speed") and not path.name.startswith("."):
            yield path


def load(results_dir: Path | str = "results"):
    """All result rows as one DataFrame (empty with the schema's columns if there are none)."""
    import pandas as pd

    files = list(_row_files(Path(results_dir)))
    frames = [pd.read_csv(p, keep_default_na=False, na_values=[""], dtype={c: str for c in TEXT_COLUMNS})
              for p in files]
    if not frames:
        return pd.DataFrame(columns=[*COLUMNS, "row_file"])
    for frame, path in zip(frames, files):
        frame["row_file"] = str(path)
    frame = pd.concat(frames, ignore_index=True)
    frame["knob_value"] = frame["knob_value"].astype(str)
    frame["uncounted_ops"] = frame["uncounted_ops"].map(lambda v: "" if pd.isna(v) else str(v))
    return upgrade(frame)


# What a row written before a column existed implicitly had in it (a column absent from every row read);
# every other column added since is missing (NaN).  ``recipe``: rows before it trained on the core's
# equal budget.
ABSENT_VALUES: dict[str, Any] = {"code_version": "", "recipe": "matched"}


def upgrade(frame):
    """Rows of every schema version in today's columns: a column no row read has is added with
    :data:`ABSENT_VALUES` (NaN where it names none), and an empty ``recipe`` (a row written before it, read
    beside newer ones) is "matched".  What reads rows reads every column without asking whether it exists."""
    import pandas as pd

    missing = [c for c in COLUMNS if c not in frame]
    if missing:
        frame = pd.concat([frame, pd.DataFrame({c: [ABSENT_VALUES.get(c, math.nan)] * len(frame) for c in missing},
                                               index=frame.index)], axis=1)
    return frame.assign(recipe=frame["recipe"].fillna("matched"))


def row_config(row_file: Path | str) -> dict[str, Any]:
    """The resolved config a row was made with (``<row_id>.config.yaml`` beside its CSV); {} without one."""
    import yaml

    path = Path(row_file)
    config = path.with_name(path.name[:-len(".csv")] + ".config.yaml")
    return (yaml.safe_load(config.read_text()) or {}) if config.exists() else {}


def load_samples(results_dir: Path | str, task: str, method: str, row_id: str):
    import pandas as pd

    return pd.read_csv(row_dir(results_dir, task, method) / f"{row_id}.samples.csv.gz")


def to_row(values: dict[str, Any]) -> ResultRow:
    return ResultRow(**{k: values[k] for k in COLUMNS if k in values})
