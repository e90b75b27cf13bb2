"""Task ``commonvoice``: speech recognition (CTC transformer), metric WER via jiwer (registration only).

Offline default: real English sentences (Debian ``trans-de-en``) spoken by Debian ``espeak-ng`` (7 accents
× 12 voice variants, random speed and pitch), 3 s clips, 40 log-mel bins; a conv stem (4× subsampling),
the shared encoder skeleton (d 192, 4 layers, 4 heads, MLP 768) and a per-token CTC head over 29 symbols.
``commonvoice.eval_set=pocketsphinx`` scores the same model on pocketsphinx-testdata's real recordings;
``commonvoice.source=tsv`` reads a CommonVoice release directory through HuggingFace ``datasets``.
``commonvoice.pretrained=<dir>`` starts from a HuggingFace wav2vec 2.0 / XLS-R CTC checkpoint on disk
(raw 16 kHz waveform input; tasks/commonvoice/pretrained.py).
"""

from dataclasses import dataclass

from bench.params import param
from bench.registry import TaskSpec, register_task


@dataclass
class CommonVoiceConfig:
    source: str = param("espeak", choices=["espeak", "tsv"],
                        help="espeak: synthesized English sentences (offline default); tsv: a CommonVoice "
                             "release directory (data_dir with <split>.tsv and clips/)")
    eval_set: str = param("default", choices=["default", "pocketsphinx"],
                          help="default: the source's evaluation split; pocketsphinx: the real recordings of "
                               "Debian pocketsphinx-testdata (10 utterances, a real-speech smoke test)")
    data_dir: str = param("", help="tsv: CommonVoice directory (e.g. cv-corpus-17.0/en) with <split>.tsv, clips/")
    train_split: str = param("train", help="tsv: training split (file <split>.tsv)")
    eval_split: str = param("test", help="tsv: evaluation split (file <split>.tsv)")
    streaming: bool = param(False, help="tsv: decode each step's training clips when it draws them and stream the "
                                        "evaluation split (HF IterableDataset), one batch of audio at a time, "
                                        "instead of computing every clip's features up front; log-mel statistics "
                                        "from 1000 training clips spread over the table")
    text_key: str = param("sentence", help="tsv: transcript column")
    path_key: str = param("path", help="tsv: audio file column (relative to clips/)")
    sentences: str = param("/usr/share/trans/de-en", help="espeak: the trans-de-en dictionary file")
    train_utterances: int = param(15000, min=0, help="espeak: training sentences to speak; tsv: first N (0 = all)")
    eval_utterances: int = param(1000, min=0, help="espeak: evaluation sentences (<= 1000); tsv: first N (0 = all)")
    min_words: int = param(2, min=1, help="espeak: shortest sentence in words")
    max_chars: int = param(48, min=4, help="espeak: longest sentence in characters (after normalisation)")
    data_seed: int = param(0, min=0, help="espeak: seed of the sentence split and of voices/speeds/pitches")
    clip_seconds: float = param(3.0, min=0.1, help="clip length: utterance + silence (training set; evaluation "
                                                   "sets of real recordings use their longest utterance if longer)")
    n_mels: int = param(40, min=4, help="log-mel bins")
    d_model: int = param(192, min=4, help="encoder width")
    layers: int = param(4, min=1, help="encoder depth of the dense model")
    heads: int = param(4, min=1, help="attention heads (must divide d_model)")
    mlp: int = param(768, min=1, help="MLP hidden size")
    spec_augment: bool = param(True, help="SpecAugment-style time/frequency masks on training batches")
    train_steps: int = param(18000, min=0, help="optimizer steps of the dense base model (576k utterances: ~45 epochs of the espeak set; the most that trains within an hour on 2 CPU cores; learning curve in reports/curves.md)")
    method_steps: int = param(2000, min=0, help="TOTAL training steps every method gets on top of the base model")
    batch_size: int = param(32, min=1, help="training batch size")
    lr: float = param(2e-3, min=0.0, help="peak learning rate (linear warm-up, cosine decay)")
    weight_decay: float = param(0.01, min=0.0, help="AdamW weight decay (0 = Adam)")
    warmup: int = param(500, min=0, help="linear warm-up steps")
    grad_clip: float = param(1.0, min=0.0, help="gradient-norm clipping (0 = off)")
    eval_batch: int = param(100, min=1, help="evaluation batch size")
    eval_samples: int = param(0, min=0, help="evaluate on the first N utterances of the eval set (0 = all)")
    pretrained: str = param("", help="HuggingFace Wav2Vec2ForCTC directory (config.json, model.safetensors or "
                                     "pytorch_model.bin, vocab.json): the dense base model starts from it and "
                                     "reads raw 16 kHz audio (d_model/layers/heads/mlp/n_mels/spec_augment are "
                                     "then unused); train_steps fine-tunes it (0 = evaluate it as is)")


SPEC = register_task(TaskSpec(
    name="commonvoice",
    config=CommonVoiceConfig,
    impl="tasks.commonvoice.task:CommonVoiceTask",
    claims="tasks.commonvoice.claims:CLAIMS",
    speed="tasks.commonvoice.speed",
    description="speech recognition with a CTC transformer: espeak-ng English offline (default), "
                "pocketsphinx real recordings (eval_set=pocketsphinx) or CommonVoice (source=tsv); metric WER",
    metric="wer",
    higher_is_better=False,
    # "token-outputs": the task reads the encoder's output at every token (CTC), not a pooled vector.
    backbones=lambda cfg: ("encoder", "token-outputs", "audio"),
    test_overrides=("commonvoice.train_utterances=24", "commonvoice.eval_utterances=12", "commonvoice.max_chars=24",
                    "commonvoice.d_model=16", "commonvoice.layers=2", "commonvoice.heads=2",
                    "commonvoice.mlp=32", "commonvoice.n_mels=16", "commonvoice.train_steps=3",
                    "commonvoice.method_steps=10", "commonvoice.batch_size=8", "commonvoice.warmup=0",
                    "commonvoice.eval_batch=8", "commonvoice.clip_seconds=2.0"),
    eval_examples=("commonvoice.eval_samples=6", "commonvoice.eval_batch=4"),
    figures="tasks.commonvoice.figures:draw",
    test_variants=((), ("commonvoice.eval_set=pocketsphinx",)),
))
