"""Row provenance: which changes to a checkout make it dirty (bench/provenance.py)."""

from __future__ import annotations

from bench import provenance
from helpers import git as _git


def test_only_code_changes_make_the_tree_dirty(tmp_path):
    """Rows, reports and the campaign's wall-time log are written by runs (the campaign appends to its log
    before every command it starts), so changing them leaves the tree clean; a code change does not."""
    files = {"bench/core.py": "x = 1\n", "results/t/m/row.csv": "a\n", "reports/claims.md": "# c\n",
             "scripts/campaign_times.tsv": "", "scripts/campaign.py": "y = 2\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "init")
    assert not provenance.tree_dirty(tmp_path)
    for name in ("results/t/m/row.csv", "reports/claims.md", "scripts/campaign_times.tsv"):
        (tmp_path / name).write_text("written by a run\n")
    (tmp_path / "untracked.py").write_text("z = 3\n")
    assert not provenance.tree_dirty(tmp_path)
    (tmp_path / "scripts/campaign.py").write_text("y = 3\n")
    assert provenance.tree_dirty(tmp_path)


def test_git_that_cannot_tell_leaves_the_flag_unknown(tmp_path):
    """Outside a checkout (or where git is missing or refuses the tree) the flag is None, never "clean"."""
    (tmp_path / "code.py").write_text("x = 1\n")
    assert provenance.tree_dirty(tmp_path) is None
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "init")
    assert provenance.tree_dirty(tmp_path) is False
