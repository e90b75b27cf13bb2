"""The device pack (scripts/device_pack.py): what travels to a lent GPU machine comes back out byte for byte,
rows made there keep their provenance, and a pack that cannot travel is refused without leaving a folder."""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from bench import provenance
from bench.errors import UserError
from helpers import load_script


def _device_pack():
    return load_script("device_pack")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def fake_sources(tmp_path, monkeypatch):
    """A committed repository and stand-ins for the Debian data, wired into the packers."""
    dp = _device_pack()
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    (repo / "results").mkdir()
    (repo / "results" / "row.csv").write_text("a,b\n1,2\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    trans = tmp_path / "de-en"
    trans.write_text("Haus :: house\n" * 500)
    fashion = tmp_path / "fashion"
    fashion.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (fashion / f"{name}.gz").write_bytes(gzip.compress(name.encode() * 10))
    espeak = tmp_path / "sys" / "usr" / "lib"
    espeak.mkdir(parents=True)
    (espeak / "libfake.so.1.0").write_bytes(b"\x7fELF" + bytes(range(200)))
    (espeak / "libfake.so.1").symlink_to("libfake.so.1.0")
    monkeypatch.setitem(dp.PACKERS, "trans-de-en", functools.partial(dp.pack_trans, source=str(trans)))
    monkeypatch.setitem(dp.PACKERS, "fashion-mnist", functools.partial(dp.pack_fashion, source=str(fashion)))
    monkeypatch.setitem(dp.PACKERS, "espeak-ng", functools.partial(
        dp.pack_espeak, files=[str(espeak / "libfake.so.1.0"), str(espeak / "libfake.so.1")]))
    return dp, repo, trans, fashion, espeak


def test_pack_then_unpack_gives_back_every_file_and_the_commit(fake_sources, tmp_path):
    dp, repo, trans, fashion, espeak = fake_sources
    out = tmp_path / "pack"
    manifest = dp.pack(["commonvoice", "imagenet", "iwslt"], out, repo=repo, wheels=False)
    assert manifest["git_sha"] == _git(repo, "rev-parse", "HEAD")
    assert [i["path"] for i in manifest["items"]][:1] == ["data/de-en.xz"]  # shared by two tasks: packed once
    assert sum(i["path"] == "data/de-en.xz" for i in manifest["items"]) == 1
    assert json.loads((out / "manifest.json").read_text())["items"] == manifest["items"]
    assert not (out.parent / "pack.partial").exists()

    # the device side: the sent tree (no .git), the pack beside it, every destination under a prefix
    sent = tmp_path / "sent"
    shutil.copytree(repo, sent, ignore=shutil.ignore_patterns(".git"))
    prefix = tmp_path / "device-root"
    lines = dp.unpack(out, prefix=str(prefix), repo=sent)
    assert len(lines) == len(manifest["items"]) + 1
    assert (prefix / dp.TRANS_DE_EN.lstrip("/")).read_bytes() == trans.read_bytes()
    for f in fashion.iterdir():
        assert (prefix / dp.FASHION_MNIST.lstrip("/") / f.name).read_bytes() == f.read_bytes()
    unpacked = prefix / dp.ESPEAK_PREFIX.lstrip("/") / str(espeak).lstrip("/")
    assert (unpacked / "libfake.so.1").is_symlink() and (unpacked / "libfake.so.1").read_bytes() == \
        (espeak / "libfake.so.1.0").read_bytes()

    # provenance there: the same commit; clean until a tracked code file changes (rows do not count)
    assert _git(sent, "rev-parse", "HEAD") == manifest["git_sha"]
    assert not provenance.tree_dirty(sent)
    (sent / "results" / "row.csv").write_text("a,b\n3,4\n")
    assert not provenance.tree_dirty(sent)
    (sent / "pkg" / "code.py").write_text("x = 2\n")
    assert provenance.tree_dirty(sent)

    # --collect: the rows written after --unpack, relative to the repository root
    now = time.time()
    os.utime(out / dp.UNPACKED, (now - 5, now - 5))
    os.utime(sent / "results" / "row.csv", (now - 10, now - 10))  # came with the tree
    (sent / "results" / "new").mkdir()
    (sent / "results" / "new" / "row.csv").write_text("c\n5\n")
    assert dp.collect(out, tmp_path / "OUT", results=sent / "results") == ["results/new/row.csv"]
    with tarfile.open(tmp_path / "OUT" / "rows.tgz") as tar:
        assert tar.getnames() == ["results/new/row.csv"]
        assert tar.extractfile("results/new/row.csv").read() == b"c\n5\n"


def test_a_corrupted_item_is_refused(fake_sources, tmp_path):
    dp, repo, *_ = fake_sources
    out = tmp_path / "pack"
    dp.pack(["iwslt"], out, repo=repo, wheels=False)
    with open(out / "data" / "de-en.xz", "ab") as f:
        f.write(b"junk")
    with pytest.raises(UserError, match="de-en.xz does not match its sha256"):
        dp.unpack(out, prefix=str(tmp_path / "root"), repo=tmp_path)
    assert not (tmp_path / "root" / dp.TRANS_DE_EN.lstrip("/")).exists()


def test_a_pack_over_the_limit_is_refused_and_the_old_pack_kept(fake_sources, tmp_path):
    dp, repo, *_ = fake_sources
    out = tmp_path / "pack"
    dp.pack(["parity"], out, repo=repo, wheels=False)
    before = (out / "manifest.json").read_text()
    with pytest.raises(UserError, match=r"exceed 0\.001 MiB; pack fewer tasks per call"):
        dp.pack(["imagenet"], out, repo=repo, wheels=False, limit_mib=0.001)
    assert (out / "manifest.json").read_text() == before
    assert not (out.parent / "pack.partial").exists()


def test_missing_data_names_the_file_and_the_package(tmp_path):
    dp = _device_pack()
    with pytest.raises(UserError, match=r"nowhere/de-en not found; install the Debian package trans-de-en"):
        dp.pack_trans(tmp_path, source=str(tmp_path / "nowhere" / "de-en"))
    with pytest.raises(UserError, match=r"holds 0 idx gz files, expected 4; install the Debian package "
                                        r"dataset-fashion-mnist"):
        dp.pack_fashion(tmp_path, source=str(tmp_path))


def test_wheels_follow_the_tasks_at_the_installed_versions():
    dp = _device_pack()
    from importlib import metadata

    assert dp.wheel_specs(["iwslt"]) == [f"{n}=={metadata.version(n)}" for n in dp.WHEELS["*"]]
    assert f"jiwer=={metadata.version('jiwer')}" in dp.wheel_specs(["commonvoice", "iwslt"])


def test_cli_errors_are_one_line(capsys, tmp_path):
    dp = _device_pack()
    assert dp.main(["--task", "imagenett", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown task 'imagenett'" in err and not (tmp_path / "p").exists()
    assert dp.main(["--out", str(tmp_path / "p")]) == 2
    assert "name at least one --task" in capsys.readouterr().err
    assert dp.main(["--unpack", str(tmp_path)]) == 2
    assert "manifest.json not found" in capsys.readouterr().err
    assert dp.main(["--collect", str(tmp_path / "OUT"), "--out", str(tmp_path)]) == 2
    assert "unpacked not found; run 'source" in capsys.readouterr().err and not (tmp_path / "OUT").exists()
