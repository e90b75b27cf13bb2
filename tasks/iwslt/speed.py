"""``bench speed`` sizes of the translation tasks (iwslt, wmt): the encoder-decoder skeleton at a named
size, random weights, timed on its teacher-forced forward (encoder over the source, decoder over a target
of the same length, in parallel) of ``length`` random tokens per side: decoding is not timed here (random
weights decode to random lengths, which would make method and dense do different work).

``dat`` is the DAT paper's IWSLT'14 model (N = 6 blocks, FFN 1024, 4 heads, encoder width 512, decoder
width 256: the skeleton's separate decoder width, ``Seq2SeqConfig.dec_d_model``).  ``tiny`` and
``tiny-narrow`` are for tests.
"""

from __future__ import annotations

from bench.speed import SpeedArch, SpeedBackbone, Stack

VOCAB = 10_000  # IWSLT'14 De-En joint BPE (fairseq's setup: about 10k types)
ARCHS = {
    "base": SpeedArch("base", Stack(512, 6, 8, 2048), Stack(512, 6, 8, 2048), length=32,
                      note="Transformer-base (Vaswani et al.), 32 source and 32 target tokens"),
    "dat": SpeedArch("dat", Stack(512, 6, 4, 1024), Stack(256, 6, 4, 1024), length=32,
                     note="the Depth-Adaptive Transformer's IWSLT'14 De-En model (encoder 512, decoder 256)"),
    "tiny": SpeedArch("tiny", Stack(32, 2, 2, 128), Stack(32, 2, 2, 128), length=8, note="tests"),
    "tiny-narrow": SpeedArch("tiny-narrow", Stack(32, 2, 2, 128), Stack(16, 2, 2, 64), length=8,
                             note="tests: a decoder narrower than the encoder"),
}


def build(arch: SpeedArch) -> SpeedBackbone:
    import torch

    from bench.models.seq2seq import EncoderDecoder, Seq2SeqConfig

    enc, dec = arch.encoder, arch.decoder or arch.encoder
    length = int(arch.length)
    vocab = 120 if arch.name.startswith("tiny") else VOCAB
    cfg = Seq2SeqConfig(vocab=vocab, d_model=enc.d_model, enc_layers=enc.layers, dec_layers=dec.layers,
                        n_heads=enc.heads, d_mlp=enc.mlp, max_positions=length + 2,
                        dec_d_model=dec.d_model if dec.d_model != enc.d_model else 0,
                        dec_heads=dec.heads if dec.heads != enc.heads else 0,
                        dec_mlp=dec.mlp if dec.mlp != enc.mlp else 0)
    model = EncoderDecoder(cfg)

    def example(batch: int, generator) -> torch.Tensor:
        return torch.randint(3, vocab, (batch, 2, length), generator=generator)  # no PAD/BOS/EOS ids: full length

    return SpeedBackbone(model, example, tokens=length, capabilities=("encoder-decoder",))
