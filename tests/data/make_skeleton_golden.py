"""Write tests/data/skeleton_golden.pt: parameter names, outputs and counted MACs of the default models.

Run it once on the code *before* a skeleton change (``PYTHONPATH=<old tree> python this_file.py OUT``);
tests/test_pretrained_skeleton.py rebuilds the same models with the current code and requires the same
names, bit-identical outputs and the same MACs.
"""

from __future__ import annotations

import sys

import torch


def build_all() -> dict[str, dict]:
    from bench import cost
    from bench.models.seq2seq import EncoderDecoder, Seq2SeqConfig
    from tasks.commonvoice.model import build_ctc_encoder
    from tasks.imagenet.vit import SMALL, build_vit
    from bench.models.transformer import EncoderConfig

    out: dict[str, dict] = {}
    torch.manual_seed(0)
    vit = build_vit(SMALL).eval()
    images = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        out["vit"] = {"keys": [(k, tuple(v.shape)) for k, v in vit.state_dict().items()], "out": vit(images),
                      "macs": cost.count(vit, images).macs}
    torch.manual_seed(1)
    ctc = build_ctc_encoder(EncoderConfig(d_model=16, n_layers=2, n_heads=2, d_mlp=32, pool="mean"), 16, 29).eval()
    frames = torch.randn(2, 60, 16)
    with torch.no_grad():
        out["ctc"] = {"keys": [(k, tuple(v.shape)) for k, v in ctc.state_dict().items()], "out": ctc(frames),
                      "macs": cost.count(ctc, frames).macs}
    torch.manual_seed(2)
    ed = EncoderDecoder(Seq2SeqConfig(vocab=50, d_model=16, enc_layers=1, dec_layers=2, n_heads=2, d_mlp=32,
                                      max_positions=12)).eval()
    ed.beam = 2
    x = torch.randint(4, 50, (3, 2, 7))
    x[:, 1, 0] = 1
    x[0, :, 5:] = 0
    with torch.no_grad():
        logits = ed(x)
        gen = ed.generate(x[:, 0])
        sample_macs = ed.last_sample_macs.clone()
        counted = cost.count(lambda s: ed.generate(s), x[:, 0]).macs
    out["seq2seq"] = {"keys": [(k, tuple(v.shape)) for k, v in ed.state_dict().items()], "out": logits,
                      "generate": gen, "sample_macs": sample_macs, "macs": counted}
    return out


if __name__ == "__main__":
    torch.save(build_all(), sys.argv[1])
