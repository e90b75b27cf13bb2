"""Pack what a lent GPU machine needs to train tasks offline, and unpack it there.

Here (network for the wheels; the data comes from this machine's Debian packages)::

    python scripts/device_pack.py --task imagenet            # writes .device/ (git-ignored)
    python scripts/device_pack.py --suite                    # what scripts/gpu_suite.py needs: wheels, no data

There, in the repository root of the copy the device tool sends (name ``.device`` in ``carry``)::

    source .device/setup.sh && python3 -m bench run method=dense task=imagenet device=cuda precision=bf16 ... \
        results_dir=results/curves; rc=$?; python3 scripts/device_pack.py --collect $OUT; exit $rc

and back here, ``tar xzf <the call's files_at>/rows.tgz --keep-old-files`` in the repository root.

The device machine reaches nothing outside itself, lacks some of this project's packages and has none of
its offline data, and what travels is capped (64 MiB: the working tree, ``shared/`` and the carried paths
together).  ``.device/`` holds:

- ``wheels/``: the packages the device image lacks (:data:`WHEELS`, at the versions installed here), built
  for its CPython (3.12 by default) on x86-64 manylinux; only a pure-Python package may fall back to a
  wheel built here (antlr4 4.9.3 has only a source release);
- ``data/``: each task's offline data (:data:`TASK_DATA`): the trans-de-en dictionary (xz), the Fashion-MNIST
  idx files, and espeak-ng (xz tar, unpacked under :data:`ESPEAK_PREFIX`, not over ``/``): its program, its
  voices, and the shared libraries it loads other than glibc's, behind a ``bin/espeak-ng`` wrapper that
  points the loader and espeak-ng at them for that process only (the device's Python keeps its own);
- ``git/``: a blobless clone of HEAD (commit and trees, no file contents: about 0.2 MB), restored as
  ``.git`` there with ``core.fileMode`` off (a copy may drop executable bits), so rows record the same
  ``git_sha`` and a clean tree exactly when the sent files match HEAD;
- ``manifest.json`` (what, where, sizes, sha256 of every data item) and ``setup.sh`` (installs the wheels,
  runs ``--unpack``, checks espeak-ng runs, sets the environment; it must be sourced).

The data lands where the tasks read it by default (``/usr/share/trans/de-en``,
``/usr/share/datasets/fashion-mnist``), so a device row's command differs from a CPU row's only in
``device`` and ``precision`` (and whatever it changes on purpose).  ``DEVICE_PREFIX`` moves every
destination under another root (the tests use it).  The pack is written beside ``--out`` and renamed into
place, so a failed pack leaves no half-written folder; one over ``--limit-mib`` (counting the files that
travel anyway) is refused with one line.  The committed rows and pages travel too and grow with every run;
no device command reads them (rows made there are new files, and ``reports/`` is drawn here), so
``--set-aside`` moves :data:`SET_ASIDE` into the git-ignored, uncarried ``.aside/`` for the call and
``--restore`` moves them back (rows keep ``git_dirty`` false: provenance leaves those folders out).  Not
packed: ``pocketsphinx-testdata`` (commonvoice's ``eval_set=pocketsphinx`` says so there in one line).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402  (no torch at import)
from bench.errors import UserError  # noqa: E402

TRANS_DE_EN = "/usr/share/trans/de-en"  # tasks/iwslt/data.py DING_PATH, tasks/commonvoice/data.py TRANS_DE_EN
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # tasks/imagenet/data.py FASHION_MNIST_DIR
ESPEAK_PREFIX = "/opt/bench-espeak"  # the device README: unpack packages away from / (they can break it)
ESPEAK_DATA = "/usr/lib/x86_64-linux-gnu/espeak-ng-data"  # Debian's espeak-ng-data (amd64)
# glibc's own libraries: the device's loader must use its own (they are versioned together)
GLIBC = re.compile(r"^(ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv|libutil)\.so")

# the data each task reads offline (keys of PACKERS)
TASK_DATA = {"iwslt": ["trans-de-en"], "imagenet": ["fashion-mnist"], "commonvoice": ["trans-de-en", "espeak-ng"],
             "parity": []}
# packages the device image lacks (its package list: the device tool's KINDS.md), per task; "*" for all
WHEELS = {"*": ["hydra-core", "omegaconf", "antlr4-python3-runtime"], "commonvoice": ["jiwer", "rapidfuzz"]}
DEVICE_LIMIT_MIB = 64
RETURN_LIMIT_MIB = 16  # the largest file a device call sends back from $OUT
SET_ASIDE = ("reports", "results")  # committed outputs no device command reads
ASIDE = ".aside"  # where --set-aside keeps them: git-ignored, and not carried
UNPACKED = "unpacked"  # marker file --unpack leaves in the pack: rows newer than it are the device's

ESPEAK_WRAPPER = """\
#!/bin/sh
# espeak-ng from the device pack (scripts/device_pack.py): its libraries and voices, for this process only
d=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH="$d/lib" ESPEAK_DATA_PATH="$d/share" exec "$d/bin/espeak-ng.bin" "$@"
"""


@dataclass(frozen=True)
class Item:
    """One packed file: its path under the pack and where ``--unpack`` puts it."""
    path: str
    dest: str
    how: str  # "xz" (decompress), "copy", "tar" (extract into dest)


def _item(written: Path, out: Path, dest: str, how: str) -> Item:
    """``written`` under the packer's folder ``out`` (the pack's ``data/``), as a path in the pack."""
    return Item(written.relative_to(out.parent).as_posix(), dest, how)


def pack_trans(out: Path, source: str = TRANS_DE_EN, preset: int = 9) -> list[Item]:
    if not Path(source).is_file():
        raise UserError(f"device_pack: {source} not found; install the Debian package trans-de-en")
    written = out / "de-en.xz"
    with open(source, "rb") as src, lzma.open(written, "wb", preset=preset) as dst:
        shutil.copyfileobj(src, dst)
    return [_item(written, out, TRANS_DE_EN, "xz")]


def pack_fashion(out: Path, source: str = FASHION_MNIST, preset: int = 9) -> list[Item]:
    files = sorted(Path(source).glob("*-ubyte.gz")) if Path(source).is_dir() else []
    if len(files) != 4:
        raise UserError(f"device_pack: {source} holds {len(files)} idx gz files, expected 4; install the Debian "
                        "package dataset-fashion-mnist")
    (out / "fashion-mnist").mkdir()
    items = []
    for f in files:  # already gzip: copied as they are
        written = Path(shutil.copy2(f, out / "fashion-mnist" / f.name))
        items.append(_item(written, out, f"{FASHION_MNIST}/{f.name}", "copy"))
    return items


def shared_libraries(binary: str) -> list[str]:
    """The shared libraries ``binary`` loads (``ldd``: the whole closure), glibc's aside."""
    try:
        listed = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise UserError(f"device_pack: ldd {binary} failed ({e}); install libc-bin") from None
    libs = [m.group(2) for m in re.finditer(r"^\s*(\S+) => (/\S+)", listed, flags=re.M)]
    missing = re.findall(r"^\s*(\S+) => not found", listed, flags=re.M)
    if missing:
        raise UserError(f"device_pack: {binary} needs {missing[0]}, which is not installed here; "
                        "run apt-get install -y espeak-ng")
    return [lib for lib in libs if not GLIBC.match(Path(lib).name)]


def pack_espeak(out: Path, binary: str | None = None, libs: list[str] | None = None, data_dir: str = ESPEAK_DATA,
                preset: int = 9) -> list[Item]:
    """espeak-ng as ``bin/espeak-ng.bin`` behind the ``bin/espeak-ng`` wrapper, its libraries in ``lib/``
    (by the names the program asks for), its voices in ``share/espeak-ng-data``."""
    binary = binary or shutil.which("espeak-ng")
    if not binary or not Path(data_dir).is_dir():
        raise UserError(f"device_pack: espeak-ng or its voices ({data_dir}) not found; "
                        "run apt-get install -y espeak-ng")
    libs = shared_libraries(binary) if libs is None else libs
    written = out / "espeak-ng.tar.xz"
    with tarfile.open(written, "w:xz", preset=preset) as tar:
        tar.add(os.path.realpath(binary), arcname="bin/espeak-ng.bin")
        wrapper = tarfile.TarInfo("bin/espeak-ng")
        wrapper.size, wrapper.mode = len(ESPEAK_WRAPPER.encode()), 0o755
        with tempfile.TemporaryFile() as f:
            f.write(ESPEAK_WRAPPER.encode())
            f.seek(0)
            tar.addfile(wrapper, f)
        for lib in libs:
            tar.add(os.path.realpath(lib), arcname=f"lib/{Path(lib).name}")
        tar.add(data_dir, arcname="share/espeak-ng-data")
    return [_item(written, out, ESPEAK_PREFIX, "tar")]


PACKERS = {"trans-de-en": pack_trans, "fashion-mnist": pack_fashion, "espeak-ng": pack_espeak}


def wheel_specs(tasks: list[str]) -> list[str]:
    """``name==version`` of :data:`WHEELS` for ``tasks``, at the versions installed here."""
    names = [n for key in ["*", *tasks] for n in WHEELS.get(key, [])]
    specs = []
    for name in dict.fromkeys(names):
        try:
            specs.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            raise UserError(f"device_pack: {name} is not installed here; run scripts/setup.sh first") from None
    return specs


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1].strip()


def fetch_wheels(specs: list[str], out: Path, python: str) -> None:
    """Binary wheels for the device's CPython; a package with only a source release is built into a wheel
    here, accepted only when that wheel is pure Python (``-none-any``: it runs on any CPython)."""
    platforms = [f"--platform={p}" for p in ("manylinux_2_17_x86_64", "manylinux2014_x86_64",
                                             "manylinux_2_27_x86_64", "manylinux_2_28_x86_64")]
    for spec in specs:
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              f"--python-version={python}", "--implementation=cp", *platforms, "-d", str(out),
                              spec], capture_output=True, text=True)
        if got.returncode == 0:
            continue
        with tempfile.TemporaryDirectory() as built:
            wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", built, spec],
                                   capture_output=True, text=True)
            made = list(Path(built).glob("*.whl"))
            if wheel.returncode != 0 or not made or not all(w.name.endswith("-none-any.whl") for w in made):
                raise UserError(f"device_pack: no wheel of {spec} for CPython {python} on x86-64 manylinux "
                                f"({_last_line(got.stderr)}); check the package index, or --python")
            for w in made:
                shutil.move(str(w), out / w.name)


def _run_git(*args: str, cwd: Path | None = None) -> str:
    """git's output; its failure as one line."""
    try:
        got = subprocess.run(["git", "-c", "safe.directory=*", *args], capture_output=True, text=True, cwd=cwd)
    except OSError:
        raise UserError("device_pack: git not found; install git") from None
    if got.returncode != 0:
        raise UserError(f"device_pack: git {args[0]} failed ({_last_line(got.stderr)})")
    return got.stdout.strip()


def clone_git(repo: Path, out: Path) -> str:
    """A depth-1 blobless clone of ``repo``'s HEAD into ``out`` (commit and trees, no file contents); its
    remote is dropped, so nothing there tries to fetch.  Returns the commit."""
    _run_git("clone", "-q", "--bare", "--depth=1", "--filter=blob:none",
             "--upload-pack=git -c uploadpack.allowFilter=true upload-pack", f"file://{repo.resolve()}", str(out))
    _run_git("-C", str(out), "remote", "remove", "origin")
    _run_git("-C", str(out), "config", "core.bare", "false")
    _run_git("-C", str(out), "config", "core.fileMode", "false")  # a copy may drop executable bits
    return _run_git("-C", str(out), "rev-parse", "HEAD")


def travelling_bytes(repo: Path, out: Path) -> int:
    """Bytes of the files the device tool sends anyway (tracked, and untracked not ignored, ``shared/``
    included), ``out`` aside."""
    listed = _run_git("-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    names = {n for n in listed.split("\0") if n}
    shared = repo / "shared"
    total = sum(f.stat().st_size for f in shared.rglob("*") if f.is_file()) if shared.is_dir() else 0
    for name in names:
        path = repo / name
        if name.startswith("shared/") or not path.is_file() or path.is_symlink():
            continue
        if out.resolve() not in path.resolve().parents:
            total += path.stat().st_size
    return total


def _held(aside: Path) -> list[str]:
    """Which of :data:`SET_ASIDE` the ``.aside/`` folder holds."""
    return [name for name in SET_ASIDE if (aside / name).exists()]


def set_aside(repo: Path = ROOT) -> list[str]:
    """Move :data:`SET_ASIDE` under ``repo/.aside/`` (one ``rename`` each, nothing copied); returns what moved.
    Refused, with nothing moved, while an earlier set-aside is still there."""
    aside = repo / ASIDE
    held = _held(aside)
    if held:
        raise UserError(f"device_pack: {aside / held[0]} is still set aside from an earlier call; "
                        f"run --restore first")
    aside.mkdir(exist_ok=True)
    moved = [name for name in SET_ASIDE if (repo / name).exists()]
    for name in moved:
        (repo / name).rename(aside / name)
    return moved


def restore(repo: Path = ROOT) -> list[str]:
    """Move what :func:`set_aside` moved back into the tree; returns what moved.  Refused, with nothing
    moved, where the tree holds that folder again (e.g. a ``git checkout`` brought it back)."""
    aside = repo / ASIDE
    held = _held(aside)
    clash = next((name for name in held if (repo / name).exists()), None)
    if clash:
        raise UserError(f"device_pack: both {repo / clash} and {aside / clash} exist; keep one (rows written "
                        f"since the set-aside are in {repo / clash}) and run --restore again")
    for name in held:
        (aside / name).rename(repo / name)
    if aside.is_dir() and not any(aside.iterdir()):
        aside.rmdir()
    return held


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


SETUP = """\
# source .device/setup.sh  (on the device machine, in the repository root): written by scripts/device_pack.py
(return 0 2>/dev/null) || { echo "setup.sh: source it (source .device/setup.sh), do not run it" >&2; exit 2; }
_pack=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# the sent tree may belong to another user than the one running git there
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0="$PWD"
if ls "$_pack"/wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
    "$_pack"/wheels/*.whl || { echo "setup.sh: installing $_pack/wheels failed (above)" >&2; return 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 scripts/device_pack.py --unpack "$_pack" || return 1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -f "$_pack/data/espeak-ng.tar.xz" ]; then
  export PATH="${DEVICE_PREFIX:-}@ESPEAK_PREFIX@/bin:$PATH"
  _said=$(espeak-ng -w "$_pack/espeak-check.wav" "test" 2>&1) && [ -s "$_pack/espeak-check.wav" ] ||
    { echo "setup.sh: espeak-ng from the pack does not run: $(echo "$_said" | tail -n 1)" >&2; return 1; }
  rm -f "$_pack/espeak-check.wav"
fi
unset _pack _said
"""


def pack(tasks: list[str], out: Path, *, repo: Path = ROOT, python: str = "3.12",
         limit_mib: float = DEVICE_LIMIT_MIB, wheels: bool = True, preset: int = 9) -> dict:
    """Write the pack for ``tasks`` to ``out`` (replacing it) and return its manifest."""
    unknown = [t for t in tasks if t not in TASK_DATA]
    if unknown:
        raise UserError(f"device_pack: unknown task {unknown[0]!r}; expected one of {', '.join(TASK_DATA)}")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "data").mkdir(parents=True)
    try:
        items: list[Item] = []
        for name in dict.fromkeys(d for t in tasks for d in TASK_DATA[t]):
            items += PACKERS[name](tmp / "data", preset=preset)
        (tmp / "wheels").mkdir()
        fetch_wheels(wheel_specs(tasks) if wheels else [], tmp / "wheels", python)
        commit = clone_git(repo, tmp / "git")
        (tmp / "setup.sh").write_text(SETUP.replace("@ESPEAK_PREFIX@", ESPEAK_PREFIX))
        manifest = {"tasks": tasks, "git_sha": commit, "tree_dirty": provenance.tree_dirty(repo), "python": python,
                    "wheels": sorted(p.name for p in (tmp / "wheels").glob("*.whl")),
                    "items": [{"path": i.path, "dest": i.dest, "how": i.how, "bytes": (tmp / i.path).stat().st_size,
                               "sha256": sha256(tmp / i.path)} for i in items]}
        size, tree = folder_bytes(tmp), travelling_bytes(repo, out)
        if size + tree > limit_mib * 2**20:
            raise UserError(f"device_pack: the pack ({size / 2**20:.1f} MiB) and the files that travel anyway "
                            f"({tree / 2**20:.1f} MiB) exceed {limit_mib:g} MiB; pack fewer tasks per call, "
                            f"or move {' and '.join(f'{n}/' for n in SET_ASIDE)} out of the tree for the call "
                            f"with --set-aside (--restore puts them back)")
        manifest["pack_mib"], manifest["tree_mib"] = round(size / 2**20, 2), round(tree / 2**20, 2)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
        return manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_manifest(pack_dir: Path) -> dict:
    path = pack_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"device_pack: {path} not found; run scripts/device_pack.py here and carry it") from None
    except ValueError as e:
        raise UserError(f"device_pack: {path} is not JSON ({e}); pack it again") from None
    items = manifest.get("items") if isinstance(manifest, dict) else None
    if not isinstance(items, list) or "git_sha" not in manifest or not all(
            isinstance(i, dict) and {"path", "dest", "how", "sha256"} <= set(i) for i in items):
        raise UserError(f"device_pack: {path} lacks git_sha or items with path, dest, how and sha256; "
                        "pack it again")
    return manifest


def restore_git(pack_dir: Path, repo: Path, sha: str) -> str:
    """Make ``pack_dir/git`` the ``.git`` of ``repo`` (the sent files are its work tree) and check that HEAD
    is the packed commit; a ``.git`` already there (a warm machine) must hold that commit."""
    target = repo / ".git"
    if target.exists():
        head = _run_git("-C", str(repo), "rev-parse", "HEAD")
        if head != sha:
            raise UserError(f"device_pack: {target} holds commit {head[:12]}, the pack {sha[:12]}; remove it "
                            f"(rm -rf {target}) and source setup.sh again")
    else:
        git_dir = pack_dir / "git"
        if not git_dir.is_dir():
            raise UserError(f"device_pack: {git_dir} not found and {target} missing; pack again and carry it")
        # the index from the sent files first, so a failure leaves the pack's git/ where it was
        _run_git(f"--git-dir={git_dir}", f"--work-tree={repo}", "reset", "-q")
        shutil.move(str(git_dir), str(target))
        if _run_git("-C", str(repo), "rev-parse", "HEAD") != sha:
            raise UserError(f"device_pack: {target} is not at the packed commit {sha[:12]}; pack again")
    dirty = provenance.tree_dirty(repo)
    return f"git: HEAD {sha[:12]}, " + {True: "tracked code differs from it (rows: git_dirty)", False: "clean",
                                        None: "git cannot tell whether tracked code differs (rows: git_dirty empty)"}[dirty]


def unpack(pack_dir: Path, *, prefix: str = "", repo: Path = ROOT) -> list[str]:
    """Put each packed item where the tasks read it (under ``prefix``), all checked against their sha256
    before anything is written, and restore ``git/`` as ``repo``'s ``.git``; returns one line per thing."""
    manifest = read_manifest(pack_dir)
    for item in manifest["items"]:
        source = pack_dir / item["path"]
        if not source.is_file():
            raise UserError(f"device_pack: {source} is missing; carry the whole pack folder")
        if sha256(source) != item["sha256"]:
            raise UserError(f"device_pack: {source} does not match its sha256 in the manifest; pack it again")
    done = []
    for item in manifest["items"]:
        source, dest = pack_dir / item["path"], Path(prefix + item["dest"])
        if item["how"] == "tar":
            shutil.rmtree(dest, ignore_errors=True)  # a warm machine's earlier unpack
            dest.mkdir(parents=True)
            with tarfile.open(source) as tar:
                try:
                    tar.extractall(dest, filter="data")
                except tarfile.FilterError as e:
                    raise UserError(f"device_pack: {source} holds {e}; pack it again") from None
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(dest.name + ".partial")
            with (lzma.open(source) if item["how"] == "xz" else open(source, "rb")) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst)
            partial.replace(dest)
        done.append(f"{item['path']} -> {dest}")
    done.append(restore_git(pack_dir, repo, manifest["git_sha"]))
    (pack_dir / UNPACKED).touch()  # --collect takes the rows written after this
    return done


def collect(pack_dir: Path, out_dir: Path, *, results: Path = ROOT / "results") -> list[str]:
    """Tar the files under ``results`` written since ``--unpack`` (the rows made on the device) into
    ``out_dir/rows.tgz``, paths relative to the repository root (untar them there); returns their paths."""
    marker = pack_dir / UNPACKED
    if not marker.is_file():
        raise UserError(f"device_pack: {marker} not found; source {pack_dir}/setup.sh before training")
    since = marker.stat().st_mtime
    new = sorted(p for p in results.rglob("*") if p.is_file() and p.stat().st_mtime > since)
    out_dir.mkdir(parents=True, exist_ok=True)
    partial, final = out_dir / "rows.tgz.partial", out_dir / "rows.tgz"
    with tarfile.open(partial, "w:gz") as tar:
        for path in new:
            tar.add(path, arcname=path.relative_to(results.parent).as_posix())
    if partial.stat().st_size > RETURN_LIMIT_MIB * 2**20:
        partial.unlink()
        raise UserError(f"device_pack: the {len(new)} new files under {results} exceed the {RETURN_LIMIT_MIB} MiB "
                        "a device call sends back in one file; collect fewer (copy them to $OUT in parts)")
    partial.replace(final)
    return [p.relative_to(results.parent).as_posix() for p in new]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", default=[], help=f"repeatable: {', '.join(TASK_DATA)}")
    parser.add_argument("--suite", action="store_true",
                        help="pack what scripts/gpu_suite.py needs (the wheels every task needs, no data); "
                             "with --task, that task's data too")
    parser.add_argument("--out", default=str(ROOT / ".device"), help="the pack's folder (default .device)")
    parser.add_argument("--python", default="3.12", help="the device's CPython version, for the wheels")
    parser.add_argument("--limit-mib", type=float, default=DEVICE_LIMIT_MIB,
                        help="what may travel in one call, this repository's files included")
    there = parser.add_mutually_exclusive_group()
    there.add_argument("--set-aside", action="store_true",
                       help=f"here, before the device call: move {', '.join(SET_ASIDE)} to {ASIDE}/ (not carried)")
    there.add_argument("--restore", action="store_true", help=f"here, after it: move them back from {ASIDE}/")
    there.add_argument("--unpack", metavar="DIR", help="on the device machine: unpack the pack in DIR")
    there.add_argument("--collect", metavar="OUT",
                       help="on the device machine, after training: the rows written since --unpack into "
                            "OUT/rows.tgz (OUT: the device call's $OUT); untar it in the repository root here")
    args = parser.parse_args(argv)
    try:
        if (args.unpack or args.collect) and (args.task or args.suite):
            raise UserError("device_pack: --task and --suite pack here; --unpack and --collect run there, "
                            "without --task")
        if (args.set_aside or args.restore) and args.task:
            raise UserError("device_pack: --set-aside and --restore move folders here; give them alone or "
                            "with --suite")
        if args.restore:
            moved = restore(ROOT)
            print(f"[device_pack] restored {', '.join(f'{n}/' for n in moved) or 'nothing'} from {ASIDE}/")
            return 0
        if args.set_aside:
            moved = set_aside(ROOT)
            print(f"[device_pack] moved {', '.join(f'{n}/' for n in moved) or 'nothing'} to {ASIDE}/; "
                  f"after the device call run: python scripts/device_pack.py --restore")
            if not args.suite:
                return 0
        if args.collect:
            rows = collect(Path(args.out), Path(args.collect))
            print(f"[device_pack] {args.collect}/rows.tgz: {len(rows)} files" + "".join(f"\n  {r}" for r in rows))
        elif args.unpack:
            for line in unpack(Path(args.unpack), prefix=os.environ.get("DEVICE_PREFIX", "")):
                print(f"[device_pack] {line}")
        elif not args.task and not args.suite:
            raise UserError("device_pack: name at least one --task (" + ", ".join(TASK_DATA) + ") or --suite")
        else:
            try:
                manifest = pack(args.task, Path(args.out), python=args.python, limit_mib=args.limit_mib)
            except UserError:
                if args.set_aside:  # no pack: the tree as it was
                    restore(ROOT)
                raise
            name = Path(args.out).name
            print(f"[device_pack] {args.out}: {manifest['pack_mib']} MiB for "
                  f"{', '.join(args.task + (['the GPU suite'] if args.suite else []))} "
                  f"(+ {manifest['tree_mib']} MiB of repository files) at {manifest['git_sha'][:12]}"
                  + (" (tracked code differs from it: rows made there will say git_dirty)"
                     if manifest["tree_dirty"] else "")
                  + f"; carry ['{name}'] and begin the command with 'source {name}/setup.sh && '")
        return 0
    except UserError as e:
        print(str(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
