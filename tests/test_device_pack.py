"""The device pack (scripts/device_pack.py): what travels to a lent GPU machine comes back out byte for byte,
rows made there keep their provenance, setup.sh works when sourced, and a pack or unpack that cannot work
is refused in one line without leaving anything half-written."""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from bench import provenance
from bench.errors import UserError
from helpers import ROOT, load_script
from helpers import git as _git

FAKE_ESPEAK = """\
#!/bin/sh
# stands in for espeak-ng: writes a non-empty file for -w FILE
while [ $# -gt 0 ]; do [ "$1" = "-w" ] && printf 'RIFF' > "$2"; shift; done
"""


def _device_pack():
    return load_script("device_pack")


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def fake_sources(tmp_path, monkeypatch):
    """A committed repository holding the script (and the bench modules it imports), an executable file,
    and stand-ins for the Debian data, wired into the packers."""
    dp = _device_pack()
    repo = tmp_path / "repo"
    for name in ("scripts/device_pack.py", "bench/__init__.py", "bench/errors.py", "bench/provenance.py"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "results").mkdir()
    (repo / "results" / "row.csv").write_text("a,b\n1,2\n")
    _git(repo, "init", "-q")
    _commit(repo, "one")
    trans = tmp_path / "de-en"
    trans.write_text("Haus :: house\n" * 500)
    fashion = tmp_path / "fashion"
    fashion.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (fashion / f"{name}.gz").write_bytes(gzip.compress(name.encode() * 10))
    espeak = tmp_path / "espeak"
    (espeak / "voices").mkdir(parents=True)
    (espeak / "bin").mkdir()
    (espeak / "bin" / "espeak-ng").write_text(FAKE_ESPEAK)
    (espeak / "bin" / "espeak-ng").chmod(0o755)
    (espeak / "voices" / "en").write_text("name english\n")
    (espeak / "libfake.so.1.0").write_bytes(b"\x7fELF" + bytes(range(200)))
    (espeak / "libfake.so.1").symlink_to("libfake.so.1.0")
    monkeypatch.setitem(dp.PACKERS, "trans-de-en", functools.partial(dp.pack_trans, source=str(trans)))
    monkeypatch.setitem(dp.PACKERS, "fashion-mnist", functools.partial(dp.pack_fashion, source=str(fashion)))
    monkeypatch.setitem(dp.PACKERS, "espeak-ng", functools.partial(
        dp.pack_espeak, binary=str(espeak / "bin" / "espeak-ng"), libs=[str(espeak / "libfake.so.1")],
        data_dir=str(espeak / "voices")))
    return dp, repo, trans, fashion, espeak


def _sent(repo: Path, to: Path, pack_dir: Path) -> Path:
    """The tree the device tool sends (no .git, executable bits dropped), with the pack carried in it."""
    shutil.copytree(repo, to, ignore=shutil.ignore_patterns(".git"))
    (to / "run.sh").chmod(0o644)
    shutil.copytree(pack_dir, to / ".device")
    return to


def test_pack_then_unpack_gives_back_every_file_and_the_commit(fake_sources, tmp_path):
    dp, repo, trans, fashion, espeak = fake_sources
    out = tmp_path / "pack"
    manifest = dp.pack(["commonvoice", "imagenet", "iwslt"], out, repo=repo, wheels=False, preset=0)
    assert manifest["git_sha"] == _git(repo, "rev-parse", "HEAD") and manifest["tree_dirty"] is False
    paths = [i["path"] for i in manifest["items"]]
    assert paths.count("data/de-en.xz") == 1 and all((out / p).is_file() for p in paths)  # shared: packed once
    assert json.loads((out / "manifest.json").read_text())["items"] == manifest["items"]
    assert not (tmp_path / "pack.partial").exists()

    sent = _sent(repo, tmp_path / "sent", out)
    prefix = tmp_path / "device-root"
    lines = dp.unpack(sent / ".device", prefix=str(prefix), repo=sent)
    assert len(lines) == len(manifest["items"]) + 1 and lines[-1].endswith(", clean")
    assert (prefix / dp.TRANS_DE_EN.lstrip("/")).read_bytes() == trans.read_bytes()
    for f in fashion.iterdir():
        assert (prefix / dp.FASHION_MNIST.lstrip("/") / f.name).read_bytes() == f.read_bytes()
    unpacked = prefix / dp.ESPEAK_PREFIX.lstrip("/")
    assert (unpacked / "lib" / "libfake.so.1").read_bytes() == (espeak / "libfake.so.1.0").read_bytes()
    assert (unpacked / "share" / "espeak-ng-data" / "en").read_text() == "name english\n"
    said = subprocess.run([str(unpacked / "bin" / "espeak-ng"), "-w", str(tmp_path / "x.wav"), "hi"])
    assert said.returncode == 0 and (tmp_path / "x.wav").read_bytes() == b"RIFF"  # through the wrapper

    # provenance there: the same commit, clean although the copy dropped an executable bit; rows do not
    # count, tracked code does
    assert _git(sent, "rev-parse", "HEAD") == manifest["git_sha"]
    assert _git(sent, "status", "--porcelain", "--untracked-files=no") == ""
    assert not provenance.tree_dirty(sent)
    (sent / "results" / "row.csv").write_text("a,b\n3,4\n")
    assert not provenance.tree_dirty(sent)
    (sent / "scripts" / "device_pack.py").write_text("changed = True\n")
    assert provenance.tree_dirty(sent)

    # --collect: the rows written after --unpack, relative to the repository root
    now = time.time()
    os.utime(sent / ".device" / dp.UNPACKED, (now - 5, now - 5))
    os.utime(sent / "results" / "row.csv", (now - 10, now - 10))  # came with the tree
    (sent / "results" / "new").mkdir()
    (sent / "results" / "new" / "row.csv").write_text("c\n5\n")
    assert dp.collect(sent / ".device", tmp_path / "OUT", results=sent / "results") == ["results/new/row.csv"]
    with tarfile.open(tmp_path / "OUT" / "rows.tgz") as tar:
        assert tar.getnames() == ["results/new/row.csv"]
        assert tar.extractfile("results/new/row.csv").read() == b"c\n5\n"


def test_a_warm_machine_unpacks_again_only_at_the_same_commit(fake_sources, tmp_path):
    dp, repo, *_ = fake_sources
    dp.pack(["iwslt"], tmp_path / "pack", repo=repo, wheels=False, preset=0)
    sent = _sent(repo, tmp_path / "sent", tmp_path / "pack")
    dp.unpack(sent / ".device", prefix=str(tmp_path / "root"), repo=sent)
    shutil.rmtree(sent / ".device")
    shutil.copytree(tmp_path / "pack", sent / ".device")  # the next call carries the pack again
    assert dp.unpack(sent / ".device", prefix=str(tmp_path / "root"), repo=sent)[-1].endswith(", clean")

    (repo / "scripts" / "new.py").write_text("x = 1\n")
    second = _commit(repo, "two")
    dp.pack(["iwslt"], tmp_path / "pack", repo=repo, wheels=False, preset=0)
    shutil.rmtree(sent / ".device")
    shutil.copytree(tmp_path / "pack", sent / ".device")
    with pytest.raises(UserError, match=rf"\.git holds commit \w{{12}}, the pack {second[:12]}; remove it"):
        dp.unpack(sent / ".device", prefix=str(tmp_path / "root"), repo=sent)


def test_a_failed_git_restore_is_one_line_and_keeps_the_pack(fake_sources, tmp_path, monkeypatch):
    dp, repo, *_ = fake_sources
    dp.pack(["parity"], tmp_path / "pack", repo=repo, wheels=False)
    sent = _sent(repo, tmp_path / "sent", tmp_path / "pack")
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    with pytest.raises(UserError, match="git not found; install git"):
        dp.unpack(sent / ".device", repo=sent)
    assert (sent / ".device" / "git").is_dir() and not (sent / ".git").exists()


def test_setup_sh_must_be_sourced_and_sets_up_espeak(fake_sources, tmp_path):
    dp, repo, *_ = fake_sources
    dp.pack(["commonvoice"], tmp_path / "pack", repo=repo, wheels=False, preset=0)
    sent = _sent(repo, tmp_path / "sent", tmp_path / "pack")
    python_first = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # python3 is this interpreter
    env = {**os.environ, "PATH": python_first, "DEVICE_PREFIX": str(tmp_path / "root")}
    ran = subprocess.run(["bash", ".device/setup.sh"], cwd=sent, env=env, capture_output=True, text=True)
    assert ran.returncode == 2 and ran.stderr == "setup.sh: source it (source .device/setup.sh), do not run it\n"
    script = "source .device/setup.sh && command -v espeak-ng && echo \"$HF_HUB_OFFLINE ${_pack:-unset}\""
    ran = subprocess.run(["bash", "-c", script], cwd=sent, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-2:] == [f"{tmp_path}/root{dp.ESPEAK_PREFIX}/bin/espeak-ng", "1 unset"]
    assert _git(sent, "rev-parse", "HEAD") == _git(repo, "rev-parse", "HEAD")


@pytest.mark.skipif(shutil.which("espeak-ng") is None or shutil.which("ldd") is None, reason="needs espeak-ng")
def test_the_real_espeak_runs_from_its_unpacked_folder(tmp_path):
    """espeak-ng, its voices and its non-glibc libraries, unpacked elsewhere, speak through the wrapper."""
    dp = _device_pack()
    (tmp_path / "data").mkdir()
    item = dp.pack_espeak(tmp_path / "data", preset=0)[0]
    libs = dp.shared_libraries(shutil.which("espeak-ng"))
    assert any("libespeak-ng" in lib for lib in libs) and not any(dp.GLIBC.match(Path(lib).name) for lib in libs)
    with tarfile.open(tmp_path / item.path) as tar:
        tar.extractall(tmp_path / "espeak", filter="data")
    wav = tmp_path / "hello.wav"
    said = subprocess.run([str(tmp_path / "espeak" / "bin" / "espeak-ng"), "-v", "en", "-w", str(wav), "hello"],
                          capture_output=True, text=True)
    assert said.returncode == 0, said.stderr
    assert wav.read_bytes()[:4] == b"RIFF" and wav.stat().st_size > 4000


def test_a_corrupted_or_missing_item_is_refused_before_anything_is_written(fake_sources, tmp_path):
    dp, repo, *_ = fake_sources
    out = tmp_path / "pack"
    dp.pack(["commonvoice"], out, repo=repo, wheels=False, preset=0)
    with open(out / "data" / "espeak-ng.tar.xz", "ab") as f:  # the second item: the first is not written
        f.write(b"junk")
    with pytest.raises(UserError, match="espeak-ng.tar.xz does not match its sha256"):
        dp.unpack(out, prefix=str(tmp_path / "root"), repo=tmp_path)
    (out / "data" / "espeak-ng.tar.xz").unlink()
    with pytest.raises(UserError, match="espeak-ng.tar.xz is missing; carry the whole pack folder"):
        dp.unpack(out, prefix=str(tmp_path / "root"), repo=tmp_path)
    assert not (tmp_path / "root").exists()
    (out / "manifest.json").write_text('{"items": []}')
    with pytest.raises(UserError, match="manifest.json lacks git_sha or items"):
        dp.unpack(out, repo=tmp_path)


def test_a_pack_over_the_limit_is_refused_and_the_old_pack_kept(fake_sources, tmp_path):
    dp, repo, *_ = fake_sources
    out = tmp_path / "pack"
    dp.pack(["parity"], out, repo=repo, wheels=False)
    before = (out / "manifest.json").read_text()
    with pytest.raises(UserError, match=r"exceed 0\.001 MiB; pack fewer tasks per call"):
        dp.pack(["imagenet"], out, repo=repo, wheels=False, limit_mib=0.001)
    assert (out / "manifest.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["pack", "repo", "de-en", "fashion", "espeak"])


def test_a_platform_wheel_never_falls_back_to_one_built_here(tmp_path, monkeypatch):
    """Only a pure-Python wheel may be built here when the index has no wheel for the device's CPython."""
    dp = _device_pack()

    def pip(argv, capture_output, text):
        if argv[3] == "download":
            return subprocess.CompletedProcess(argv, 1, "", "ERROR: No matching distribution found\n")
        built = Path(argv[argv.index("-w") + 1])
        name = argv[-1].split("==")[0]
        (built / (f"{name}-1.0-py3-none-any.whl" if name == "pure" else f"{name}-1.0-cp311-cp311-linux_x86_64.whl")
         ).write_bytes(b"PK")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(dp.subprocess, "run", pip)
    dp.fetch_wheels(["pure==1.0"], tmp_path, "3.12")
    assert [p.name for p in tmp_path.iterdir()] == ["pure-1.0-py3-none-any.whl"]
    with pytest.raises(UserError, match=r"no wheel of fast==1.0 for CPython 3.12 on x86-64 manylinux "
                                        r"\(ERROR: No matching distribution found\)"):
        dp.fetch_wheels(["fast==1.0"], tmp_path, "3.12")
    assert [p.name for p in tmp_path.iterdir()] == ["pure-1.0-py3-none-any.whl"]


def test_missing_data_names_the_file_and_the_package(tmp_path):
    dp = _device_pack()
    with pytest.raises(UserError, match=r"nowhere/de-en not found; install the Debian package trans-de-en"):
        dp.pack_trans(tmp_path, source=str(tmp_path / "nowhere" / "de-en"))
    with pytest.raises(UserError, match=r"holds 0 idx gz files, expected 4; install the Debian package "
                                        r"dataset-fashion-mnist"):
        dp.pack_fashion(tmp_path, source=str(tmp_path))
    with pytest.raises(UserError, match=r"espeak-ng or its voices \(.*nowhere\) not found"):
        dp.pack_espeak(tmp_path, binary="/bin/sh", data_dir=str(tmp_path / "nowhere"))


def test_cli_errors_are_one_line(capsys, tmp_path):
    dp = _device_pack()
    cases = [(["--task", "imagenett", "--out", str(tmp_path / "p")], "unknown task 'imagenett'"),
             (["--out", str(tmp_path / "p")], "name at least one --task"),
             (["--unpack", str(tmp_path)], "manifest.json not found"),
             (["--unpack", str(tmp_path), "--task", "iwslt"], "without --task"),
             (["--collect", str(tmp_path / "OUT"), "--out", str(tmp_path)], "unpacked not found; source")]
    for argv, says in cases:
        assert dp.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, (argv, err)
    assert not (tmp_path / "p").exists() and not (tmp_path / "OUT").exists()


def test_set_aside_shrinks_what_travels_and_restore_puts_it_back(fake_sources, tmp_path, monkeypatch, capsys):
    dp, repo, *_ = fake_sources
    (repo / "reports").mkdir()
    (repo / "reports" / "page.md").write_text("x" * 5000)
    (repo / ".gitignore").write_text("/.aside/\n")
    _commit(repo, "pages")
    before = dp.travelling_bytes(repo, tmp_path / "pack")
    assert dp.set_aside(repo) == ["reports", "results"]
    assert before - dp.travelling_bytes(repo, tmp_path / "pack") == 5000 + len("a,b\n1,2\n")
    assert provenance.tree_dirty(repo) is False  # rows made meanwhile stay clean
    with pytest.raises(UserError, match=r"reports is still set aside from an earlier call; run --restore first"):
        dp.set_aside(repo)
    (repo / "results").mkdir()  # e.g. a run wrote a row meanwhile: restoring would lose one of them
    with pytest.raises(UserError, match=r"both .*results and .*\.aside/results exist; keep one"):
        dp.restore(repo)
    assert (repo / ".aside" / "reports").is_dir() and not (repo / "reports").exists()  # nothing moved
    (repo / "results").rmdir()
    assert dp.restore(repo) == ["reports", "results"]
    assert not (repo / ".aside").exists() and _git(repo, "status", "--porcelain") == ""

    # a pack that fails after --set-aside leaves the tree as it was
    monkeypatch.setattr(dp, "ROOT", repo)
    monkeypatch.setattr(dp, "pack", lambda *a, **k: (_ for _ in ()).throw(UserError("device_pack: no wheels")))
    assert dp.main(["--suite", "--set-aside", "--out", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err == "device_pack: no wheels\n"
    assert (repo / "reports" / "page.md").is_file() and not (repo / ".aside").exists()
    assert dp.main(["--set-aside"]) == 0 and not (repo / "reports").exists()
    assert "after the device call run: python scripts/device_pack.py --restore" in capsys.readouterr().out
    assert dp.main(["--restore"]) == 0 and (repo / "reports" / "page.md").is_file()
    assert dp.main(["--restore", "--task", "iwslt"]) == 2
    assert "give them alone or with --suite" in capsys.readouterr().err
