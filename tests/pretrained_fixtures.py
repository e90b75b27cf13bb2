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


# A few sentence pairs for the SentencePiece models of the tiny Marian checkpoint (every letter occurs).
TEXT_DE = ["Das ist ein kleines Haus.", "Wir gehen heute nach Hause.", "Er trinkt jeden Morgen Kaffee.",
           "Die Katze schläft auf dem Sofa.", "Kannst du mir bitte helfen?", "Ich habe keine Zeit.",
           "Quer über den Platz zog ein Wind.", "Sie fährt mit dem Zug nach Berlin.", "Das Wetter ist schön.",
           "Jugend forscht, vexiert, quält nie.", "Wo ist der Bahnhof?", "Heute ist Montag."]
TEXT_EN = ["This is a small house.", "We are going home today.", "He drinks coffee every morning.",
           "The cat sleeps on the sofa.", "Can you help me please?", "I have no time.",
           "A quick wind crossed the square.", "She takes the train to Berlin.", "The weather is nice.",
           "Jazz fever vexed the quiet zebra.", "Where is the station?", "Today is Monday."]
MARIAN_TINY = dict(d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                   decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)


def _spm(texts: list[str], prefix: Path, size: int) -> None:
    import sentencepiece as spm

    corpus = prefix.with_suffix(".txt")
    corpus.write_text("\n".join(texts * 4) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(prefix), vocab_size=size,
                                   model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                   minloglevel=2, num_threads=1, seed_sentencepiece_size=1000,
                                   bos_id=-1, eos_id=-1, unk_id=0)
    corpus.unlink()


def write_marian(directory: Path, seed: int = 0) -> Path:
    """A tiny MarianMTModel in the opus-mt-de-en layout (Swish, scaled embeddings, shared vocabulary,
    pad = last id = decoder start) with its MarianTokenizer files (source.spm, target.spm, vocab.json)."""
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _spm(TEXT_DE, directory / "source", 80)
    _spm(TEXT_EN, directory / "target", 80)
    pieces: dict[str, None] = {}
    for side in ("source", "target"):
        proc = spm.SentencePieceProcessor(model_file=str(directory / f"{side}.model"))
        for i in range(proc.get_piece_size()):
            if not proc.is_unknown(i) and not proc.is_control(i):
                pieces.setdefault(proc.id_to_piece(i), None)
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    for side in ("source", "target"):
        (directory / f"{side}.model").rename(directory / f"{side}.spm")
        (directory / f"{side}.vocab").unlink()
    tokenizer = MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"),
                                str(directory / "vocab.json"), source_lang="de", target_lang="en")
    tokenizer.save_pretrained(str(directory))
    pad = vocab["<pad>"]
    torch.manual_seed(seed)
    config = MarianConfig(vocab_size=len(vocab), decoder_vocab_size=len(vocab), pad_token_id=pad, eos_token_id=0,
                          decoder_start_token_id=pad, forced_eos_token_id=0, activation_function="swish",
                          scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
                          dropout=0.1, bad_words_ids=[[pad]], **MARIAN_TINY)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # larger random weights than HF's init, so decodes differ from token to token
        for name, p in model.named_parameters():
            if "norm" not in name and "embed_positions" not in name and p.dim() > 1:
                p.normal_(0.0, 0.2)
        model.final_logits_bias.normal_(0.0, 0.5)
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
