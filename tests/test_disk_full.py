"""A full device ends in one line naming the file and the space, with nothing half-written and the previous
checkpoint kept: on a real tiny tmpfs where the machine allows mounting one (root), and with a patched writer
everywhere."""

import errno
import subprocess
from pathlib import Path

import pytest
import torch

from bench import checkpoints, results
from bench.errors import UserError
from tests.test_failures import _bench, _files, _one_error_line


@pytest.fixture
def tiny_device(tmp_path):
    """A 96 KB tmpfs at ``tmp_path/full``, filled to ``leave`` bytes free by ``fill(leave)``."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip("this machine does not allow mounting a tmpfs (not root)")

    def fill(leave: int) -> None:
        import shutil

        free = shutil.disk_usage(mount).free
        (mount / "filler").write_bytes(b"\0" * max(0, free - leave))

    yield mount, fill
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_results_dir_writes_no_row_and_says_so_in_one_line(tmp_path, tiny_device):
    mount, fill = tiny_device
    fill(4096)  # room for the write check and the config, not for the per-sample table and the row
    done = _bench(tmp_path, f"results_dir={mount}")
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert line.startswith(f"bench: error: no space left on the device writing {mount}/parity/dense/"), line
    assert _files(mount) == ["filler"], "nothing half-written: no row, no per-sample table, no config"


def test_a_full_cache_keeps_the_previous_checkpoint_and_says_so_in_one_line(tmp_path, tiny_device):
    mount, fill = tiny_device
    fill(1024)  # less than the tiny model's checkpoint
    done = _bench(tmp_path, f"cache_dir={mount}")
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert line.startswith(f"bench: error: no space left on the device writing {mount}/parity/dense/"), line
    assert "needed" in line
    assert not [f for f in _files(mount) if f.endswith((".tmp", ".lock"))]


def test_a_failed_row_write_leaves_neither_row_nor_its_companions(tmp_path, monkeypatch):
    import pandas as pd

    from tests.helpers import blank_row

    real = pd.DataFrame.to_csv

    def full_on_the_row(self, path, *args, **kwargs):
        if ".csv.gz" not in str(path):  # the per-sample table fits, the row does not
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_on_the_row)
    row = blank_row(task="parity", method="dense")
    with pytest.raises(UserError, match="no space left on the device writing .*/parity/dense/r1.csv"):
        results.append(tmp_path, row, "r1", samples=pd.DataFrame({"a": [1]}), config_yaml="seed: 0\n")
    assert _files(tmp_path) == []


def test_torch_save_failing_on_a_full_device_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import shutil

    path = tmp_path / "stage.pt"
    checkpoints.atomic_save({"model": {"w": torch.zeros(4)}, "step": 1}, path)
    before = path.read_bytes()

    def torn_write(obj, target):  # what torch.save raises when the device fills up mid-write
        Path(target).write_bytes(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1216 vs 1110")

    monkeypatch.setattr(torch, "save", torn_write)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**6, 10**6 - 100, 100))
    with pytest.raises(UserError, match=r"writing .*stage.pt \(100 B free, about 1.0 MB needed\)"):
        checkpoints.atomic_save({"model": {"w": torch.zeros(2**18)}, "step": 2}, path)
    assert path.read_bytes() == before and _files(tmp_path) == ["stage.pt"]


def test_other_write_failures_are_not_called_a_full_device(tmp_path, monkeypatch):
    def broken(obj, target):
        raise RuntimeError("some other failure")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(RuntimeError, match="some other failure"):
        checkpoints.atomic_save({"model": {}}, tmp_path / "x.pt")
