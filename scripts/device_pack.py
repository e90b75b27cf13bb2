"""Pack what a lent GPU machine needs to train tasks offline, and unpack it there.

Here (network for the wheels; the data comes from this machine's Debian packages)::

    python scripts/device_pack.py --task imagenet            # writes .device/ (git-ignored)

There, in the repository root of the copy the device tool sends (name ``.device`` in ``carry``)::

    source .device/setup.sh && python3 -m bench run method=dense task=imagenet device=cuda precision=bf16 ... \
        results_dir=results/curves; python3 scripts/device_pack.py --collect $OUT

and back here, ``tar xzf <the call's files_at>/rows.tgz`` in the repository root.

The device machine reaches nothing outside itself, lacks some of this project's packages and has none of
its offline data, and what travels is capped (64 MiB: the working tree, ``shared/`` and the carried paths
together).  ``.device/`` holds:

- ``wheels/``: the packages the device image lacks (:data:`WHEELS`, at the versions installed here), built
  for its CPython (3.12 by default) on x86-64 manylinux;
- ``data/``: each task's offline data (:data:`TASK_DATA`): the trans-de-en dictionary (xz), the Fashion-MNIST
  idx files, and espeak-ng with its libraries and voices (a tar.xz unpacked under :data:`ESPEAK_PREFIX`,
  not over ``/``);
- ``git/``: a blobless clone of HEAD (no file contents, about 0.2 MB), restored as ``.git`` there, so rows
  record the same ``git_sha`` and a clean tree exactly when the sent files match HEAD;
- ``manifest.json`` (what, sizes, sha256) and ``setup.sh`` (installs the wheels, unpacks, sets the
  environment; it runs ``--unpack``).

The data lands where the tasks read it by default (``/usr/share/trans/de-en``,
``/usr/share/datasets/fashion-mnist``), so a device row's command differs from a CPU row's only in
``device`` and ``precision`` (and whatever it changes on purpose).  ``DEVICE_PREFIX`` moves every
destination under another root (the tests use it).  The pack is written beside ``--out`` and renamed into
place, so a failed pack leaves no half-written folder; one over ``--limit-mib`` (counting the files that
travel anyway) is refused with one line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.errors import UserError  # noqa: E402

TRANS_DE_EN = "/usr/share/trans/de-en"  # tasks/iwslt/data.py DING_PATH, tasks/commonvoice/data.py TRANS_DE_EN
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # tasks/imagenet/data.py FASHION_MNIST_DIR
ESPEAK_PREFIX = "/opt/bench-espeak"  # the device README: unpack packages away from / (they can break it)
ESPEAK_PACKAGES = ("espeak-ng", "libespeak-ng1", "espeak-ng-data", "libpcaudio0", "libsonic0")
ESPEAK_SKIP = ("/usr/share/doc", "/usr/share/man", "/usr/share/vim", "/usr/share/doc-base")

# the data each task reads offline (items of PACKERS)
TASK_DATA = {"iwslt": ["trans-de-en"], "imagenet": ["fashion-mnist"], "commonvoice": ["trans-de-en", "espeak-ng"],
             "parity": []}
# packages the device image lacks (its package list: the device tool's KINDS.md), per task; "*" for all
WHEELS = {"*": ["hydra-core", "omegaconf", "antlr4-python3-runtime"], "commonvoice": ["jiwer", "rapidfuzz"]}
DEVICE_LIMIT_MIB = 64
UNPACKED = "unpacked"  # marker file --unpack leaves in the pack: rows newer than it are the device's


@dataclass(frozen=True)
class Item:
    """One packed file: its path under the pack and where ``--unpack`` puts it."""
    path: str
    dest: str
    how: str  # "xz" (decompress), "copy", "tar" (extract into dest)


def pack_trans(out: Path, source: str = TRANS_DE_EN) -> list[Item]:
    if not Path(source).is_file():
        raise UserError(f"device_pack: {source} not found; install the Debian package trans-de-en")
    with open(source, "rb") as src, lzma.open(out / "de-en.xz", "wb", preset=9) as dst:
        shutil.copyfileobj(src, dst)
    return [Item("data/de-en.xz", TRANS_DE_EN, "xz")]


def pack_fashion(out: Path, source: str = FASHION_MNIST) -> list[Item]:
    files = sorted(Path(source).glob("*-ubyte.gz")) if Path(source).is_dir() else []
    if len(files) != 4:
        raise UserError(f"device_pack: {source} holds {len(files)} idx gz files, expected 4; install the Debian "
                        "package dataset-fashion-mnist")
    (out / "fashion-mnist").mkdir()
    for f in files:
        shutil.copy2(f, out / "fashion-mnist" / f.name)
    return [Item(f"data/fashion-mnist/{f.name}", f"{FASHION_MNIST}/{f.name}", "copy") for f in files]


def espeak_files(packages: tuple[str, ...] = ESPEAK_PACKAGES) -> list[str]:
    """The installed files of espeak-ng's Debian packages (documentation aside)."""
    try:
        listed = subprocess.run(["dpkg", "-L", *packages], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise UserError("device_pack: espeak-ng's packages are not all installed "
                        f"({', '.join(packages)}); run apt-get install -y espeak-ng") from None
    return [p for p in listed.splitlines() if p.startswith("/") and not p.startswith(ESPEAK_SKIP)
            and (os.path.isfile(p) or os.path.islink(p))]


def pack_espeak(out: Path, files: list[str] | None = None) -> list[Item]:
    with tarfile.open(out / "espeak-ng.tar.xz", "w:xz", preset=9) as tar:
        for path in files if files is not None else espeak_files():
            tar.add(path, arcname=path.lstrip("/"), recursive=False)
    return [Item("data/espeak-ng.tar.xz", ESPEAK_PREFIX, "tar")]


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


def fetch_wheels(specs: list[str], out: Path, python: str) -> None:
    """Binary wheels for the device's CPython; a package with only a source release (antlr4 4.9.3) is built
    into a wheel here (pure Python)."""
    platforms = [f"--platform={p}" for p in ("manylinux_2_17_x86_64", "manylinux2014_x86_64",
                                             "manylinux_2_27_x86_64", "manylinux_2_28_x86_64")]
    for spec in specs:
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              f"--python-version={python}", "--implementation=cp", *platforms, "-d", str(out),
                              spec], capture_output=True, text=True)
        if got.returncode != 0:
            got = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), spec],
                                 capture_output=True, text=True)
        if got.returncode != 0:
            last = (got.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"device_pack: no wheel for {spec} ({last}); check the package index")


def clone_git(repo: Path, out: Path) -> str:
    """A depth-1 blobless clone of ``repo``'s HEAD into ``out`` (commit and trees, no file contents); its
    remote is dropped, so nothing there tries to fetch.  Returns the commit."""
    upload = "git -c uploadpack.allowFilter=true upload-pack"
    got = subprocess.run(["git", "clone", "-q", "--bare", "--depth=1", "--filter=blob:none",
                          f"--upload-pack={upload}", f"file://{repo.resolve()}", str(out)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        raise UserError(f"device_pack: git clone of {repo} failed ({got.stderr.strip()}); pack from a checkout")
    subprocess.run(["git", "-C", str(out), "remote", "remove", "origin"], capture_output=True, check=True)
    subprocess.run(["git", "-C", str(out), "config", "core.bare", "false"], check=True)
    return subprocess.run(["git", "-C", str(out), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def travelling_bytes(repo: Path, out: Path) -> int:
    """Bytes of the files the device tool sends anyway (tracked, and untracked not ignored), ``out`` aside."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True).stdout
    total = 0
    for name in {n for n in listed.split("\0") if n}:
        path = repo / name
        if path.is_file() and not path.is_symlink() and out.resolve() not in path.resolve().parents:
            total += path.stat().st_size
    return total


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


SETUP = """\
# source .device/setup.sh  (on the device machine, in the repository root): written by scripts/device_pack.py
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ls "$here"/wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
    "$here"/wheels/*.whl || return 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 scripts/device_pack.py --unpack "$here" || return 1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -f "$here/data/espeak-ng.tar.xz" ]; then
  e="${DEVICE_PREFIX:-}%(espeak)s"
  export PATH="$e/usr/bin:$PATH" LD_LIBRARY_PATH="$e/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ESPEAK_DATA_PATH="$e/usr/lib/x86_64-linux-gnu"
fi
"""


def pack(tasks: list[str], out: Path, *, repo: Path = ROOT, python: str = "3.12",
         limit_mib: float = DEVICE_LIMIT_MIB, wheels: bool = True) -> dict:
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
            items += PACKERS[name](tmp / "data")
        specs = wheel_specs(tasks) if wheels else []
        (tmp / "wheels").mkdir()
        fetch_wheels(specs, tmp / "wheels", python)
        commit = clone_git(repo, tmp / "git")
        (tmp / "setup.sh").write_text(SETUP % {"espeak": ESPEAK_PREFIX})
        manifest = {"tasks": tasks, "git_sha": commit, "python": python,
                    "wheels": sorted(p.name for p in (tmp / "wheels").glob("*.whl")),
                    "items": [{"path": i.path, "dest": i.dest, "how": i.how, "bytes": (tmp / i.path).stat().st_size,
                               "sha256": sha256(tmp / i.path)} for i in items]}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        size, tree = folder_bytes(tmp), travelling_bytes(repo, out)
        if size + tree > limit_mib * 2**20:
            raise UserError(f"device_pack: the pack ({size / 2**20:.1f} MiB) and the files that travel anyway "
                            f"({tree / 2**20:.1f} MiB) exceed {limit_mib:g} MiB; pack fewer tasks per call")
        manifest["pack_mib"], manifest["tree_mib"] = round(size / 2**20, 2), round(tree / 2**20, 2)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        return manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def unpack(pack_dir: Path, *, prefix: str = "", repo: Path = ROOT) -> list[str]:
    """Put each packed item where the tasks read it (under ``prefix``, checked against its sha256) and
    restore ``git/`` as ``repo``'s ``.git``; returns one line per thing done."""
    manifest_path = pack_dir / "manifest.json"
    if not manifest_path.is_file():
        raise UserError(f"device_pack: {manifest_path} not found; run scripts/device_pack.py here and carry it")
    manifest = json.loads(manifest_path.read_text())
    for item in manifest["items"]:  # all checked before anything is written
        source = pack_dir / item["path"]
        if not source.is_file() or sha256(source) != item["sha256"]:
            raise UserError(f"device_pack: {source} does not match its sha256 in the manifest; pack it again")
    done = []
    for item in manifest["items"]:
        source, dest = pack_dir / item["path"], Path(prefix + item["dest"])
        if item["how"] == "tar":
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(source) as tar:
                tar.extractall(dest, filter="tar")
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(dest.name + ".partial")
            with (lzma.open(source) if item["how"] == "xz" else open(source, "rb")) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst)
            partial.replace(dest)
        done.append(f"{item['path']} -> {dest}")
    git_dir = pack_dir / "git"
    if git_dir.is_dir() and not (repo / ".git").exists():
        shutil.move(str(git_dir), str(repo / ".git"))
        subprocess.run(["git", "-C", str(repo), "reset", "-q"], check=True)  # the index, from the sent files
        done.append(f"git: HEAD {manifest['git_sha'][:12]}")
    (pack_dir / UNPACKED).touch()  # --collect takes the rows written after this
    return done


def collect(pack_dir: Path, out_dir: Path, *, results: Path = ROOT / "results") -> list[str]:
    """Tar the files under ``results`` written since ``--unpack`` (the rows made on the device) into
    ``out_dir/rows.tgz``, paths relative to the repository root (untar them there); returns their paths."""
    marker = pack_dir / UNPACKED
    if not marker.is_file():
        raise UserError(f"device_pack: {marker} not found; run 'source {pack_dir}/setup.sh' before training")
    since = marker.stat().st_mtime
    new = sorted(p for p in results.rglob("*") if p.is_file() and p.stat().st_mtime > since)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out_dir / "rows.tgz.partial", "w:gz") as tar:
        for path in new:
            tar.add(path, arcname=str(path.relative_to(results.parent)))
    (out_dir / "rows.tgz.partial").replace(out_dir / "rows.tgz")
    return [str(p.relative_to(results.parent)) for p in new]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", default=[], help=f"repeatable: {', '.join(TASK_DATA)}")
    parser.add_argument("--out", default=str(ROOT / ".device"), help="the pack's folder (default .device)")
    parser.add_argument("--python", default="3.12", help="the device's CPython version, for the wheels")
    parser.add_argument("--limit-mib", type=float, default=DEVICE_LIMIT_MIB,
                        help="what may travel in one call, this repository's files included")
    parser.add_argument("--unpack", metavar="DIR", help="on the device machine: unpack the pack in DIR")
    parser.add_argument("--collect", metavar="OUT",
                        help="on the device machine, after training: the rows written since --unpack into "
                             "OUT/rows.tgz (OUT: the device call's $OUT); untar it in the repository root here")
    args = parser.parse_args(argv)
    try:
        if args.collect:
            rows = collect(Path(args.out), Path(args.collect))
            print(f"[device_pack] {args.collect}/rows.tgz: {len(rows)} files" + "".join(f"\n  {r}" for r in rows))
            return 0
        if args.unpack:
            for line in unpack(Path(args.unpack), prefix=os.environ.get("DEVICE_PREFIX", "")):
                print(f"[device_pack] {line}")
            return 0
        if not args.task:
            raise UserError("device_pack: name at least one --task (" + ", ".join(TASK_DATA) + ")")
        manifest = pack(args.task, Path(args.out), python=args.python, limit_mib=args.limit_mib)
        print(f"[device_pack] {args.out}: {manifest['pack_mib']} MiB for {', '.join(args.task)} "
              f"(+ {manifest['tree_mib']} MiB of repository files) at {manifest['git_sha'][:12]}; "
              f"carry it: run(carry=['{Path(args.out).name}'], command='source {Path(args.out).name}/setup.sh && ...')")
        return 0
    except UserError as e:
        print(str(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
