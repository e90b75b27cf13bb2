"""Tiny random checkpoints in the papers' on-disk layouts, written by the reference libraries' own code.

    write_wav2vec2(dir, stable)   HF Wav2Vec2ForCTC: config.json, model.safetensors, vocab.json,
                                  tokenizer_config.json, preprocessor_config.json (save_pretrained)
    write_marian(dir)             HF MarianMTModel + MarianTokenizer: config.json, model.safetensors,
                                  source.spm, target.spm, vocab.json (SentencePiece models trained here)
    write_fairseq(dir)            fairseq transformer: checkpoint_best.pt ({"cfg": {"model": Namespace},
                                  "model": state dict in fairseq names}) + dict.de.txt, dict.en.txt
    write_deit(path)              a timm-layout DeiT/ViT state dict ({"model": ...}) as a .pth

Weights are random (seeded); tiny sizes keep tests fast.  ``python -m tests.pretrained_fixtures OUT``
writes all of them under OUT (the example commands of docs/data.md use such a directory).
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


FAIRSEQ_TINY = dict(encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_layers=2, encoder_attention_heads=2,
                    decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2, decoder_attention_heads=2,
                    max_source_positions=64, max_target_positions=64)


def _fairseq_words(texts: list[str]) -> list[str]:
    words: dict[str, None] = {}
    for text in texts:
        for word in text.split():
            words.setdefault(word, None)
    return list(words)


def write_fairseq(directory: Path, seed: int = 0, dec_dim: int | None = None):
    """A tiny fairseq ``transformer_iwslt_de_en``-style checkpoint (post-norm, ReLU, separate de/en
    dictionaries; the FSMT-derived one has its own output projection, the DAT one shares it).  With equal
    widths the weights are those of a random HF ``FSMTForConditionalGeneration`` (the port of fairseq's transformer), returned for the
    equality tests; ``dec_dim`` makes the decoder narrower (the DAT layout, encoder 16 / decoder dec_dim),
    with random tensors of fairseq's shapes (no HF reference has that layout).  Returns (dir, fsmt or None)."""
    from argparse import Namespace

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    src_words, tgt_words = _fairseq_words(TEXT_DE), _fairseq_words(TEXT_EN)
    for lang, words in (("de", src_words), ("en", tgt_words)):
        (directory / f"dict.{lang}.txt").write_text("".join(f"{w} {100 - i}\n" for i, w in enumerate(words)),
                                                     encoding="utf-8")
    n_src, n_tgt = 4 + len(src_words), 4 + len(tgt_words)
    arch = dict(FAIRSEQ_TINY)
    torch.manual_seed(seed)
    fsmt = None
    if dec_dim is None:
        from transformers import FSMTConfig, FSMTForConditionalGeneration

        config = FSMTConfig(langs=["de", "en"], src_vocab_size=n_src, tgt_vocab_size=n_tgt, d_model=16,
                            encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                            encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                            activation_function="relu", scale_embedding=True, pad_token_id=1, bos_token_id=0,
                            eos_token_id=2, decoder_start_token_id=2, dropout=0.0)
        fsmt = FSMTForConditionalGeneration(config).eval()
        with torch.no_grad():
            for name, p in fsmt.named_parameters():
                if "norm" not in name and "embed_positions" not in name and p.dim() > 1:
                    p.normal_(0.0, 0.2)
        sd = {k[len("model."):]: v.clone() for k, v in fsmt.state_dict().items() if k.startswith("model.")}
        sd = {k: v for k, v in sd.items() if not k.endswith("embed_positions.weight")}
    else:
        arch.update(decoder_embed_dim=dec_dim, decoder_ffn_embed_dim=2 * dec_dim)
        sd = _random_fairseq_state(arch, n_src, n_tgt)
    for side in ("encoder", "decoder"):
        sd[f"{side}.embed_positions._float_tensor"] = torch.FloatTensor(1)
        sd[f"{side}.version"] = torch.Tensor([3])
    args = Namespace(arch="transformer_iwslt_de_en", activation_fn="relu", dropout=0.3, encoder_normalize_before=False,
                     decoder_normalize_before=False, share_decoder_input_output_embed=fsmt is None,
                     share_all_embeddings=False, no_scale_embedding=False, layernorm_embedding=False,
                     encoder_learned_pos=False, decoder_learned_pos=False, **arch)
    torch.save({"cfg": {"model": args, "task": {"source_lang": "de", "target_lang": "en"}}, "model": sd,
                "optimizer_history": [], "extra_state": {}}, directory / "checkpoint_best.pt")
    return directory, fsmt


def _random_fairseq_state(arch: dict, n_src: int, n_tgt: int) -> dict:
    """Random weights in fairseq's names and shapes (TransformerEncoder/Decoder; cross-attention k/v take
    the encoder width, fairseq's MultiheadAttention(kdim=vdim=encoder_embed_dim))."""
    de, dd = arch["encoder_embed_dim"], arch["decoder_embed_dim"]
    sd = {"encoder.embed_tokens.weight": torch.randn(n_src, de) * 0.2,
          "decoder.embed_tokens.weight": torch.randn(n_tgt, dd) * 0.2}
    sd["decoder.output_projection.weight"] = sd["decoder.embed_tokens.weight"]

    def linear(prefix: str, d_in: int, d_out: int) -> None:
        sd[prefix + ".weight"] = torch.randn(d_out, d_in) * d_in ** -0.5
        sd[prefix + ".bias"] = torch.randn(d_out) * 0.1

    def norm(prefix: str, d: int) -> None:
        sd[prefix + ".weight"] = 1 + 0.1 * torch.randn(d)
        sd[prefix + ".bias"] = 0.1 * torch.randn(d)

    for side, d, ffn, layers in (("encoder", de, arch["encoder_ffn_embed_dim"], arch["encoder_layers"]),
                                 ("decoder", dd, arch["decoder_ffn_embed_dim"], arch["decoder_layers"])):
        for i in range(layers):
            p = f"{side}.layers.{i}"
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                linear(f"{p}.self_attn.{proj}", d, d)
            norm(f"{p}.self_attn_layer_norm", d)
            if side == "decoder":
                linear(f"{p}.encoder_attn.q_proj", d, d)
                linear(f"{p}.encoder_attn.k_proj", de, d)
                linear(f"{p}.encoder_attn.v_proj", de, d)
                linear(f"{p}.encoder_attn.out_proj", d, d)
                norm(f"{p}.encoder_attn_layer_norm", d)
            linear(f"{p}.fc1", d, ffn)
            linear(f"{p}.fc2", ffn, d)
            norm(f"{p}.final_layer_norm", d)
    return sd


def write_deit(path: Path, seed: int = 0, image_size: int = 32, patch: int = 8, channels: int = 3,
               d: int = 16, layers: int = 2, heads: int = 2, mlp: int = 32, classes: int = 10):
    """A timm-layout DeiT state dict (``{"model": ...}``, as DeiT's released .pth files) holding the weights
    of a random HF ``ViTForImageClassification`` (HF's port of DeiT: facebook/deit-*-patch16-224), mapped
    to timm's names (q, k, v packed into ``attn.qkv``).  Returns (path, HF model)."""
    from transformers import ViTConfig, ViTForImageClassification

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
                       image_size=image_size, patch_size=patch, num_channels=channels, num_labels=classes,
                       layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True)
    model = ViTForImageClassification(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" not in name and p.dim() > 1:
                p.normal_(0.0, 0.2)
        model.vit.embeddings.cls_token.normal_(0.0, 0.5)
    hf = model.state_dict()
    sd = {"cls_token": hf["vit.embeddings.cls_token"], "pos_embed": hf["vit.embeddings.position_embeddings"],
          "patch_embed.proj.weight": hf["vit.embeddings.patch_embeddings.projection.weight"],
          "patch_embed.proj.bias": hf["vit.embeddings.patch_embeddings.projection.bias"],
          "norm.weight": hf["vit.layernorm.weight"], "norm.bias": hf["vit.layernorm.bias"],
          "head.weight": hf["classifier.weight"], "head.bias": hf["classifier.bias"]}
    for i in range(layers):  # transformers 5 names (vit.layers.i.attention.q_proj, ...)
        h, t = f"vit.layers.{i}.", f"blocks.{i}."
        for kind in ("weight", "bias"):
            sd[t + f"attn.qkv.{kind}"] = torch.cat([hf[h + f"attention.{n}_proj.{kind}"] for n in "qkv"])
            for ours, theirs in (("attn.proj", "attention.o_proj"), ("norm1", "layernorm_before"),
                                 ("norm2", "layernorm_after"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
                sd[t + f"{ours}.{kind}"] = hf[h + f"{theirs}.{kind}"]
    torch.save({"model": {k: v.clone() for k, v in sd.items()}}, path)
    return path, model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    write_wav2vec2(args.out / "wav2vec2-base-tiny", stable=False)
    write_wav2vec2(args.out / "xlsr-tiny", stable=True)
    write_marian(args.out / "opus-mt-tiny")
    write_fairseq(args.out / "fairseq-tiny")
    write_fairseq(args.out / "fairseq-dat-tiny", dec_dim=8)
    write_deit(args.out / "deit-tiny.pth")
    # the shape of the imagenet task's tiny test config (Fashion-MNIST: 28 px, 1 channel, patch 7)
    write_deit(args.out / "deit-fashion-tiny.pth", image_size=28, patch=7, channels=1)
    print(f"tiny checkpoints written under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
