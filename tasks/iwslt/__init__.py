"""Tasks ``iwslt`` (De→En) and ``wmt``: translation with the encoder–decoder skeleton, BLEU via sacreBLEU
(registration only; no torch here).

Offline default of ``iwslt``: the German–English sentence pairs of Debian's ``trans-de-en`` (the Ding
dictionary's example sentences), cleaned and split into fixed train/valid/test sets.  ``source=hf``
reads IWSLT'14 De-En, WMT or any parallel corpus through HuggingFace ``datasets`` from local parquet/
json/csv files (``data_dir``) or the local hub cache (``hf_name``).  ``wmt`` is the same task with WMT
defaults (``source=hf``, beam 4, tied decoder embeddings and output classifier); it has no offline data,
so it needs ``wmt.data_dir`` or ``wmt.hf_name``.
``pretrained=<dir>`` starts from a Marian (HF, opus-mt) or fairseq transformer checkpoint on disk
(tasks/iwslt/pretrained.py); ``dec_d_model`` gives the decoder its own width (the DAT paper's IWSLT model:
encoder 512, decoder 256).
"""

from dataclasses import dataclass

from bench.params import param
from bench.registry import TaskSpec, register_task


@dataclass
class TranslationConfig:
    source: str = param("trans-de-en", choices=["trans-de-en", "hf"],
                        help="trans-de-en: Debian's Ding dictionary sentence pairs (offline default); "
                             "hf: HuggingFace datasets from data_dir or hf_name")
    data_dir: str = param("", help="hf: directory/glob of parquet/json/jsonl/csv files (split names in the "
                                   "file names, e.g. train.parquet, test.jsonl) or a save_to_disk dir; "
                                   "trans-de-en: path of the dictionary file (default: Debian's)")
    hf_name: str = param("", help="hf: dataset name resolved from the local HF cache only (hub is offline)")
    hf_config: str = param("", help="hf: dataset config name (e.g. iwslt2017-de-en)")
    src_lang: str = param("de", help="source language key (inside a 'translation' column, or a column name)")
    tgt_lang: str = param("en", help="target language key")
    train_split: str = param("train", help="hf: training split")
    eval_split: str = param("test", help="evaluation split (trans-de-en: test or validation)")
    vocab: int = param(2000, min=16, help="joint BPE vocabulary (HF tokenizers, trained on the train split)")
    max_tokens: int = param(48, min=4, help="training pairs longer than this many BPE tokens are dropped; "
                                            "positions = max_tokens + 2")
    d_model: int = param(128, min=8, help="model width (encoder; also the decoder unless dec_d_model is set)")
    dec_d_model: int = param(0, min=0, help="decoder width (0 = d_model); cross-attention k/v map the encoder "
                                            "width to it (the DAT paper's IWSLT model: d_model=512 dec_d_model=256)")
    enc_layers: int = param(3, min=1, help="encoder blocks")
    dec_layers: int = param(6, min=1, help="decoder blocks N of the dense model (DAT: N exits)")
    heads: int = param(4, min=1, help="attention heads")
    mlp: int = param(512, min=1, help="MLP hidden size")
    dropout: float = param(0.1, min=0.0, max=0.9, help="dropout (paper's IWSLT: 0.3)")
    label_smoothing: float = param(0.1, min=0.0, max=0.9, help="label smoothing of the training loss")
    tie_output: bool = param(False, help="tie the decoder's output classifier to its token embedding (WMT)")
    train_steps: int = param(10000, min=0, help="optimizer steps of the dense base model (calibrated by the learning curve in reports/curves.md)")
    method_steps: int = param(2000, min=0, help="TOTAL training steps every method gets on top of the base model")
    batch_size: int = param(64, min=1, help="training batch size (sentence pairs)")
    bucket: int = param(50, min=1, help="length bucketing of training batches: each epoch is shuffled, cut "
                                        "into pools of bucket x batch_size pairs, each pool sorted by length "
                                        "and cut into batches, batch order shuffled (less padding); 1 = plain "
                                        "random batches")
    lr: float = param(2e-3, min=0.0, help="peak learning rate (linear warm-up, cosine decay)")
    warmup: int = param(400, min=0, help="linear warm-up steps")
    grad_clip: float = param(1.0, min=0.0, help="gradient-norm clipping (0 = off)")
    beam: int = param(5, min=1, help="beam size at evaluation (1 = greedy; IWSLT 5, WMT 4)")
    len_a: float = param(1.5, min=0.0, help="length cap per sentence: len_a·|source tokens| + len_b")
    len_b: int = param(5, min=1, help="length cap offset")
    len_penalty: float = param(1.0, min=0.0, help="final hypothesis: best score / length**len_penalty")
    eval_batch: int = param(100, min=1, help="evaluation batch size (sentences, sorted by source length unless "
                                           "streaming)")
    eval_samples: int = param(0, min=0, help="evaluate on the first N sentences of the eval split (0 = all)")
    streaming: bool = param(False, help="hf: read the eval split as a streamed HuggingFace IterableDataset, "
                                        "tokenised a batch at a time (only the raw sources/references are "
                                        "kept); batches in file order, not sorted by length (more padding)")
    train_samples: int = param(0, min=0, help="use the first N training sentence pairs only (0 = all; tests); "
                                              "ding_phrases are added in full")
    ding_phrases: int = param(0, min=0, help="trans-de-en: add the dictionary's N longest plain phrase pairs "
                                             "(its non-sentence entries, none from a line holding a validation or "
                                             "test sentence) to the training sentences (0 = sentences only)")
    pretrained: str = param("", help="checkpoint directory for the dense base model: HuggingFace Marian "
                                     "(config.json, model.safetensors, source.spm, target.spm, vocab.json) or "
                                     "fairseq (checkpoint_best.pt, dict.<src>.txt, dict.<tgt>.txt); the "
                                     "architecture and vocabulary then come from it (vocab/d_model/layers/heads/"
                                     "mlp unused); train_steps fine-tunes it (0 = evaluate it as is)")
    valid_size: int = param(500, min=1, help="trans-de-en: validation sentences")
    test_size: int = param(1000, min=1, help="trans-de-en: test sentences")


@dataclass
class WMTConfig(TranslationConfig):
    source: str = param("hf", choices=["trans-de-en", "hf"],
                        help="hf (default): WMT through HuggingFace datasets from data_dir or hf_name; "
                             "trans-de-en: the offline Ding pairs")
    beam: int = param(4, min=1, help="beam size at evaluation (WMT: 4)")
    tie_output: bool = param(True, help="tie the decoder's output classifier to its token embedding (WMT)")


# keys added after rows existed, at the value that trains what those rows trained (bench.results.identity_hash)
ADDED_DEFAULTS = (("ding_phrases", 0),)


def _backbones(cfg) -> tuple[str, ...]:
    return ("encoder-decoder", "token-outputs")


_TEST = ("vocab=120", "max_tokens=16", "d_model=16", "enc_layers=1", "dec_layers=2", "heads=2", "mlp=32",
         "dropout=0.0", "train_steps=4", "method_steps=8", "batch_size=8", "warmup=0", "beam=2",
         "eval_batch=12", "eval_samples=12", "train_samples=1500", "len_a=1.0", "len_b=3")

SPEC = register_task(TaskSpec(
    name="iwslt",
    config=TranslationConfig,
    impl="tasks.iwslt.task:TranslationTask",
    claims="tasks.iwslt.claims:CLAIMS",
    speed="tasks.iwslt.speed",
    description="De→En translation, encoder–decoder transformer, sacreBLEU: Debian trans-de-en sentence "
                "pairs offline (default) or IWSLT'14 via HuggingFace datasets (source=hf)",
    metric="bleu",
    higher_is_better=True,
    backbones=_backbones,
    test_overrides=tuple(f"iwslt.{o}" for o in _TEST),
    eval_examples=("iwslt.beam=1", "iwslt.eval_samples=6"),
    figures="tasks.iwslt.figures:translation_figures",
    added_defaults=ADDED_DEFAULTS,
))

WMT_SPEC = register_task(TaskSpec(
    name="wmt",
    config=WMTConfig,
    impl="tasks.iwslt.task:TranslationTask",
    claims="tasks.iwslt.claims:CLAIMS",
    speed="tasks.iwslt.speed",
    description="WMT translation (source=hf: local parquet/json or the HF cache; beam 4, tied classifier), "
                "same model and metric as iwslt",
    metric="bleu",
    higher_is_better=True,
    backbones=_backbones,
    test_overrides=tuple(f"wmt.{o}" for o in _TEST) + ("wmt.source=trans-de-en",),
    figures="tasks.iwslt.figures:translation_figures",
    added_defaults=ADDED_DEFAULTS,
))
