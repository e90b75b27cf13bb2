"""Tiny random checkpoints in the papers' on-disk layouts, written by the reference libraries' own code.

    write_wav2vec2(dir, stable)   HF Wav2Vec2ForCTC: config.json, model.safetensors, vocab.json,
                                  tokenizer_config.json, preprocessor_config.json (save_pretrained)
    write_marian(dir)             HF MarianMTModel + MarianTokenizer: config.json, model.safetensors,
                                  source.spm, target.spm, vocab.json (SentencePiece models trained here)
    write_fairseq(dir)            fairseq transformer: checkpoint_best.pt ({"cfg": {"model": Namespace},
                                  "model": state dict in fairseq names}) + dict.de.txt, dict.en.txt
    write_deit(path)              a timm-layout DeiT/ViT state dict ({"model": ...}) as a .pth

Weights are random (seeded); tiny sizes keep tests fast.  ``python -m tests.pretrained_fixtures OUT``
writes all of them under OUT (the README's example commands use such a directory).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
W2V_TINY = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                conv_dim=(16, 16, 16, 16), conv_kernel=(10, 4, 4, 4), conv_stride=(5, 4, 4, 4),
                num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2)


def write_wav2vec2(directory: Path, stable: bool = False, seed: int = 0) -> Path:
    """A tiny Wav2Vec2ForCTC: base layout (group norm, post-norm) or stable (layer norm, pre-norm)."""
    from transformers import Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4, "'": 5}
    vocab.update({c: 6 + i for i, c in enumerate(LETTERS)})
    (directory / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = Wav2Vec2CTCTokenizer(str(directory / "vocab.json"), word_delimiter_token="|")
    tokenizer.save_pretrained(str(directory))
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                             return_attention_mask=False).save_pretrained(str(directory))
    torch.manual_seed(seed)
    config = Wav2Vec2Config(vocab_size=len(vocab), pad_token_id=0, feat_extract_norm="layer" if stable else "group",
                            do_stable_layer_norm=stable, conv_bias=stable, **W2V_TINY)
    model = Wav2Vec2ForCTC(config).eval()
    with torch.no_grad():  # larger random weights than HF's init, so greedy decodes are not all blank
        for name, p in model.named_parameters():
            if "norm" not in name and p.dim() > 1:
                p.normal_(0.0, 0.3)
    model.save_pretrained(str(directory))
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    write_wav2vec2(args.out / "wav2vec2-base-tiny", stable=False)
    write_wav2vec2(args.out / "xlsr-tiny", stable=True)
    for name in ("write_marian", "write_fairseq", "write_deit"):
        fn = globals().get(name)
        if fn is not None:
            fn(args.out / {"write_marian": "opus-mt-tiny", "write_fairseq": "fairseq-tiny",
                           "write_deit": "deit-tiny.pth"}[name])
    print(f"tiny checkpoints written under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
