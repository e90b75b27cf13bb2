"""Export a trained dense base model from the cache into ``artifacts/``, so a fresh clone starts from it.

    .venv/bin/python scripts/export_base.py task=imagenet seed=0
    .venv/bin/python scripts/export_base.py task=imagenet seed=0 cache_dir=/scratch/cache --from CKPT \
        --command "python -m bench run method=dense task=imagenet threads=2 seed=0" --git-sha 62b4a83

The arguments other than the script's own are ``bench run`` overrides (``method`` is dense; ``dense.width``
and ``dense.depth`` name a static size).  The base's cache key is computed from them exactly as a run
computes it, so the artefact is found by every run whose key is the same (bench/artifacts.py).  ``--from``
reads the checkpoint from another file (a cache entry written under an earlier key by code whose
behaviour is the same: the golden digests say so); ``--command`` and ``--git-sha`` record what trained it
(defaults: the canonical command for these overrides, and this checkout's commit).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def export(overrides: list[str], *, source: Path | None, command: str, git_sha: str, root: Path | None) -> Path:
    from bench import artifacts, config, protocol, provenance, runner
    from bench.errors import UserError

    cfg = config.compose(["method=dense", *overrides])
    _, task_name = config.selected(cfg)
    config.check_config(cfg, "dense", task_name)
    run, task, method = runner.build(cfg, "dense", task_name)
    width, depth = float(cfg.dense.width), float(cfg.dense.depth)
    if (width, depth) == (1.0, 1.0):
        key, name = run.base_key(task), protocol.base_stage_name()
    else:
        planned = protocol.plan(method).stages[-1]
        key, name = planned.key, planned.stage.name
    ckpt = run.stage_path("dense", name, key)
    if source is None and not ckpt.exists():
        raise UserError(f"no trained base at {ckpt}: train it first (python -m bench run method=dense "
                        f"{' '.join(overrides)}), or name the checkpoint with --from")
    machine = f"{provenance.device_name('cpu')}, {os.cpu_count()} CPUs"  # the command says how it trained
    default = " ".join(["python -m bench run method=dense", *overrides])
    return artifacts.export(ckpt, key, overrides=overrides, command=command or default, git_sha=git_sha or provenance.git_sha(),
                            machine=machine, root=root, source=source)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", default="", help="checkpoint file to export (default: the cache's)")
    parser.add_argument("--command", default="", help="the command that trained it")
    parser.add_argument("--git-sha", default="", help="the commit that trained it")
    parser.add_argument("--root", default="", help="artifacts folder (default: the repository's artifacts/)")
    args, overrides = parser.parse_known_args(argv)
    from bench.config import ConfigError
    from bench.errors import UserError

    try:
        path = export(overrides, source=Path(args.source) if args.source else None, command=args.command,
                      git_sha=args.git_sha, root=Path(args.root) if args.root else None)
    except (ConfigError, UserError) as e:
        print(f"export_base: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path} and {path.with_suffix('.json').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
