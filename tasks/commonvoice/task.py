"""Task ``commonvoice``: speech recognition with a CTC transformer, WER (jiwer) with a named normaliser.

Data (``commonvoice.source``; corpora are built once and cached under ``<cache_dir>/commonvoice/data``):
  espeak  offline default: real English sentences spoken by espeak-ng (tasks/commonvoice/data.py);
  tsv     a CommonVoice release directory (``<split>.tsv`` + ``clips/``) via HuggingFace ``datasets``;
          ``streaming=true`` decodes training clips per step and streams the evaluation split instead of
          building corpora (tasks/commonvoice/streaming.py).
``commonvoice.eval_set=pocketsphinx`` evaluates the same model on the real recordings of
pocketsphinx-testdata instead (a smoke test of real speech; rows name that dataset).

Inputs are fixed-length clips.  Every utterance is followed by digital silence up to the clip length
(``clip_seconds`` for training and for the espeak evaluation set; for real evaluation sets, the longest
utterance of the set rounded up to 0.5 s, at least ``clip_seconds``), so the padding of a sample depends
on the data set only, never on the batch it runs in.  No frame is masked: silence is input, as the leading
and trailing silence of a real recording is.  Hence:
- batch invariance needs no key masks (samples never interact);
- the cost of a sample is that of its clip's frames (all of them execute) — the same clip length for every
  sample of a set, and the dense model costs the same on each; adaptive methods may spend less on silent
  frames, which is real saving on this input.  The ``dataset`` column states the share of clip time that is
  speech.  Training utterances longer than the clip are left out (counted in ``dataset``).
- CTC input length = every token of the clip; the loss is PyTorch's CTC (blank 0, mean over the batch of
  per-utterance loss divided by its target length, zero_infinity).

Metric: corpus WER of greedy CTC transcripts after the ``bench-en-v1`` normaliser (text.py), via jiwer
4.0.0; CER beside it (``extra_metrics``), per-utterance WER/CER/texts in the samples file.

``pretrained=<dir>``: the dense base model is a HuggingFace wav2vec 2.0 / XLS-R CTC checkpoint
(tasks/commonvoice/pretrained.py): corpora hold waveform clips, labels are mapped into its vocabulary for
the loss and its greedy CTC output back into the task's symbols for scoring; SpecAugment on log-mel does
not apply (wav2vec 2.0's own time masking is not implemented).  ``train_steps`` fine-tunes it.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor, nn

from bench.api import Batch, Quality, Task
from bench.errors import UserError
from bench.models.transformer import EncoderConfig
from tasks.commonvoice import data as D
from tasks.commonvoice import features as F
from tasks.commonvoice import pretrained as P
from tasks.commonvoice import streaming as S
from tasks.commonvoice import text as T
from tasks.commonvoice.model import build_ctc_encoder

EVAL_POOL = 1000  # the first EVAL_POOL shuffled sentences are reserved for evaluation


@dataclass
class Corpus:
    features: Tensor  # [N, frames, n_mels] log-mel
    labels: Tensor  # [N, W] symbol ids, -1 padded
    texts: list[str]
    seconds: list[float]
    clip_seconds: float
    description: str

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def speech_share(self) -> float:
        return float(np.sum(self.seconds)) / max(len(self) * self.clip_seconds, 1e-9)


class CommonVoiceTask(Task):
    name = "commonvoice"
    metric = "wer"
    higher_is_better = False
    not_base_keys = ("method_steps", "eval_set", "eval_batch", "eval_samples", "eval_utterances", "eval_split")

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.source = str(cfg.source)
        self.pretrained = str(cfg.pretrained)
        self.clip_samples = F.seconds_to_samples(float(cfg.clip_seconds))
        if self.pretrained:
            self._checkpoint = P.build_model(self.pretrained, "commonvoice.pretrained")
            self.vocab: P.CheckpointVocab | None = self._checkpoint.vocab
        else:
            self.vocab = None
        self.streaming = bool(cfg.streaming)
        if self.streaming and (self.source != "tsv" or str(cfg.eval_set) != "default"):
            raise UserError("commonvoice.streaming=true reads a CommonVoice release (commonvoice.source=tsv, "
                            "eval_set=default); the offline sets are built once and cached: leave it false")
        if self.source == "tsv":  # a missing release is one line now, not when the corpora are first read
            D.tsv_path(str(cfg.data_dir), str(cfg.train_split))

    # The corpora and the feature statistics are built (or read from the cache) on first use, so that what
    # needs only the configuration (a stage's key, a plan line, "this point has a row") never synthesises
    # or decodes a corpus.
    @functools.cached_property
    def train(self) -> Corpus | S.LazyClips:
        corpus = self._lazy_train() if self.streaming else self._train_corpus()
        if len(corpus) == 0:
            raise UserError(f"commonvoice: no training utterance fits a {self.cfg.clip_seconds} s clip; raise "
                            "commonvoice.clip_seconds")
        return corpus

    @functools.cached_property
    def eval(self) -> Corpus | S.EvalStream:
        return self._eval_stream() if self.streaming else self._eval_corpus()

    @functools.cached_property
    def _feature_stats(self) -> tuple[Tensor, Tensor]:
        """(mean, std) of the training log-mel features per band; waveform inputs: (0, 1)."""
        if self.pretrained:  # waveform clips: no log-mel standardisation
            return torch.zeros(1), torch.ones(1)
        if isinstance(self.train, S.LazyClips):
            return S.log_mel_statistics(self.train, int(self.cfg.n_mels), Path(self.run.cache_dir))
        feats = self.train.features.reshape(-1, self.train.features.shape[-1])
        return feats.mean(dim=0), feats.std(dim=0).clamp_min(1e-3)

    @property
    def mean(self) -> Tensor:
        return self._feature_stats[0]

    @property
    def std(self) -> Tensor:
        return self._feature_stats[1]

    # --- corpora ----------------------------------------------------------------------------------
    def _data_code(self) -> str:
        """The corpus version (data, features and text code; ``data.CORPUS_VERSION``): a change of the model
        or the task retrains but does not re-synthesise."""
        return f"v{D.CORPUS_VERSION}"

    @functools.cached_property
    def _sentences(self) -> list[str]:
        c = self.cfg
        raw = D.english_sentences(str(c.sentences))
        sentences = D.usable_sentences(raw, min_words=int(c.min_words), max_chars=int(c.max_chars))
        order = np.random.default_rng(int(c.data_seed)).permutation(len(sentences))
        sentences = [sentences[i] for i in order]
        if len(sentences) <= EVAL_POOL:
            raise UserError(f"commonvoice: only {len(sentences)} usable sentences (need more than {EVAL_POOL}); "
                            "raise commonvoice.max_chars")
        return sentences

    def _espeak(self, name: str, sentences: list[str], seed: int) -> Corpus:
        c = self.cfg
        key = {"source": "espeak", "sentences": sentences, "seed": seed, "clip": self.clip_samples,
               "n_mels": int(c.n_mels), "width": int(c.max_chars), "code": self._data_code()}
        if self.pretrained:
            key = {**key, "n_mels": None, "input": "wave", "wave_code": f"v{P.VERSION}"}
            corpus = D.cached(Path(self.run.cache_dir), f"{name}-wave", key, lambda: P.espeak_waves(
                sentences, seed=seed, clip_samples=self.clip_samples, label_width=int(c.max_chars)))
        else:
            corpus = D.cached(Path(self.run.cache_dir), name, key, lambda: D.espeak_corpus(
                sentences, seed=seed, clip_samples=self.clip_samples, n_mels=int(c.n_mels),
                label_width=int(c.max_chars)))
        dropped = len(sentences) - len(corpus["texts"])
        return Corpus(corpus["features"], corpus["labels"], corpus["texts"], corpus["seconds"],
                      self.clip_samples / F.SAMPLE_RATE,
                      f"{len(corpus['texts'])} utterances" + (f" ({dropped} longer than the clip left out)"
                                                             if dropped else ""))

    def _recordings(self, name: str, items: list[tuple[Any, str]], *, clip_samples: int | None,
                    reader) -> Corpus:
        """Real recordings; ``clip_samples=None`` sizes the clip to the longest (rounded up to 0.5 s)."""
        c = self.cfg
        lengths = [len(F.resample(*reader(p))) for p, _ in items] if clip_samples is None else None
        if clip_samples is None:
            longest = max(lengths) / F.SAMPLE_RATE if lengths else 0.0
            clip_samples = max(self.clip_samples, F.seconds_to_samples(math.ceil(longest * 2) / 2))
        else:
            kept = []
            for path, sentence in items:
                audio, rate = reader(path)
                if len(F.resample(audio, rate)) <= clip_samples:
                    kept.append((path, sentence))
            dropped = len(items) - len(kept)
            items = kept
        width = max([len(s) for _, s in items] + [1])
        key = {"items": [(str(p), s, D.file_digest(p)) for p, s in items], "clip": clip_samples,
               "n_mels": int(c.n_mels), "width": width, "code": self._data_code()}
        if self.pretrained:
            key = {**key, "n_mels": None, "input": "wave", "wave_code": f"v{P.VERSION}"}
            corpus = D.cached(Path(self.run.cache_dir), f"{name}-wave", key, lambda: P.recording_waves(
                items, clip_samples=clip_samples, label_width=width, reader=reader))
        else:
            corpus = D.cached(Path(self.run.cache_dir), name, key, lambda: D.recordings_corpus(
                items, clip_samples=clip_samples, n_mels=int(c.n_mels), label_width=width, reader=reader))
        note = f"{len(items)} utterances"
        if lengths is None and dropped:
            note += f" ({dropped} longer than the clip left out)"
        return Corpus(corpus["features"], corpus["labels"], corpus["texts"], corpus["seconds"],
                      clip_samples / F.SAMPLE_RATE, note)

    def _train_corpus(self) -> Corpus:
        c = self.cfg
        if self.source == "espeak":
            sentences = self._sentences[EVAL_POOL: EVAL_POOL + int(c.train_utterances)]
            corpus = self._espeak("espeak-train", sentences, int(c.data_seed) * 2 + 1)
        else:
            corpus = self._recordings("tsv-train", self._tsv_train_items(), clip_samples=self.clip_samples,
                                      reader=D.read_audio)
        return corpus

    def _tsv_train_items(self) -> list[tuple[Path, str]]:
        """(audio path, sentence) of the release's training split, its first ``train_utterances`` (0 = all)."""
        c = self.cfg
        items = D.tsv_items(str(c.data_dir), str(c.train_split), str(c.text_key), str(c.path_key))
        return items[: int(c.train_utterances)] if int(c.train_utterances) else items

    def _eval_corpus(self) -> Corpus:
        c = self.cfg
        if str(c.eval_set) == "pocketsphinx":
            return self._recordings("pocketsphinx", D.pocketsphinx_utterances(), clip_samples=None,
                                    reader=F.read_wav)
        if self.source == "espeak":
            n = int(c.eval_utterances)
            if n > EVAL_POOL:
                raise UserError(f"commonvoice.eval_utterances={n}: at most {EVAL_POOL} (the reserved pool)")
            return self._espeak("espeak-eval", self._sentences[:n], int(c.data_seed) * 2)
        items = D.tsv_items(str(c.data_dir), str(c.eval_split), str(c.text_key), str(c.path_key))
        if int(c.eval_utterances):
            items = items[: int(c.eval_utterances)]
        return self._recordings(f"tsv-{c.eval_split}", items, clip_samples=None, reader=D.read_audio)

    def _lazy_train(self) -> S.LazyClips:
        return S.lazy_training_set(self._tsv_train_items(), data_dir=str(self.cfg.data_dir),
                                   clip_samples=self.clip_samples, cache_dir=Path(self.run.cache_dir))

    def _eval_stream(self) -> S.EvalStream:
        c = self.cfg
        return S.EvalStream(data_dir=str(c.data_dir), split=str(c.eval_split), text_key=str(c.text_key),
                            path_key=str(c.path_key), limit=int(c.eval_utterances), evaluate=int(c.eval_samples),
                            min_clip_samples=self.clip_samples, cache_dir=Path(self.run.cache_dir))

    def _featurize(self, clips: np.ndarray) -> Tensor:
        """[N, samples] clips -> the model's input: waveforms for a checkpoint, else log-mel frames."""
        return torch.from_numpy(clips) if self.pretrained else F.clips_to_features(clips, int(self.cfg.n_mels))

    # --- data -------------------------------------------------------------------------------------
    @property
    def dataset(self) -> str:
        c = self.cfg
        if self.source == "espeak":
            train = f"espeak-ng English (trans-de-en sentences), train {self.train.description}"
        else:
            train = f"commonvoice ({c.data_dir}), {c.train_split} {self.train.description}"
        if str(c.eval_set) == "pocketsphinx":
            where = "pocketsphinx-testdata real recordings"
        elif self.source == "espeak":
            where = "espeak-ng held-out sentences"
        else:
            where = f"{c.eval_split}"
        n = self._eval_count()
        if isinstance(self.eval, S.EvalStream):
            return (f"{train}; eval {where} streamed: {self.eval.total} utterances"
                    + (f", first {n}" if n < self.eval.total else "")
                    + f"; {self.eval.clip_samples / F.SAMPLE_RATE:g} s "
                    f"clips, speech {100 * self.eval.speech_share:.0f}% of clip time")
        return (f"{train}; eval {where}: {self.eval.description}"
                + (f", first {n}" if n < len(self.eval) else "")
                + f"; {self.eval.clip_seconds:g} s clips, speech {100 * self.eval.speech_share:.0f}% of clip time")

    @property
    def metric_signature(self) -> str:
        c = self.cfg
        if self.vocab is not None:
            return (f"wer|jiwer 4.0.0|norm:{T.NORMALIZER}|greedy-ctc|chars:{len(T.VOCAB)} via checkpoint vocab "
                    f"{self.vocab.size}|wave@16k|clip>={c.clip_seconds:g}s")
        return (f"wer|jiwer 4.0.0|norm:{T.NORMALIZER}|greedy-ctc|chars:{len(T.VOCAB)}|logmel{c.n_mels}"
                f"@16k/25ms/10ms|clip>={c.clip_seconds:g}s")

    def _eval_count(self) -> int:
        if isinstance(self.eval, S.EvalStream):
            return self.eval.count  # already limited by eval_utterances and eval_samples
        limit = int(self.cfg.eval_samples)
        return min(limit, len(self.eval)) if limit else len(self.eval)

    def train_batch(self, step: int, batch_size: int) -> Batch:
        return self._train_rows(step, batch_size, slice(None))

    def train_shard(self, step: int, batch_size: int, rank: int, world: int) -> Batch:
        """Only this rank's rows are decoded (streaming) or copied; the indices and the SpecAugment masks are
        drawn for the whole global batch first, so a shard holds exactly the single-process rows."""
        if world == 1:
            return self.train_batch(step, batch_size)
        n = min(batch_size, len(self.train))
        return self._train_rows(step, batch_size, slice(rank * n // world, (rank + 1) * n // world))

    def _train_rows(self, step: int, batch_size: int, rows: slice) -> Batch:
        rng = np.random.default_rng([int(self.run.seed), int(step), 7])
        idx = rng.choice(len(self.train), size=min(batch_size, len(self.train)), replace=False)
        masks = self._mask_plan(rng, len(idx)) if bool(self.cfg.spec_augment) and not self.pretrained else None
        idx = idx[rows]
        if isinstance(self.train, S.LazyClips):
            x, y = self.train.batch(idx, self._featurize)  # decoded now (in a DataLoader worker if any)
        else:
            x, y = self.train.features[idx].clone(), self.train.labels[idx]
        if masks is not None:
            self._spec_augment(x, masks[rows])
        return Batch(x, y, {"index": torch.as_tensor(idx)})

    def _mask_plan(self, rng: np.random.Generator, n: int) -> list[list[tuple[int, int, int, int]]]:
        """SpecAugment-style masks (Park et al. 2019) of ``n`` utterances: per utterance 2 × (mel band start,
        width ≤ 6, time span start, length ≤ 15 frames), drawn in this order from the step's generator."""
        frames, mels = F.n_frames(self.clip_samples), int(self.cfg.n_mels)
        plan = []
        for _ in range(n):
            row = []
            for _ in range(2):
                w = int(rng.integers(0, 7))
                f0 = int(rng.integers(0, mels - w + 1))
                tw = int(rng.integers(0, 16))
                t0 = int(rng.integers(0, frames - tw + 1))
                row.append((f0, w, t0, tw))
            plan.append(row)
        return plan

    def _spec_augment(self, x: Tensor, plan: list[list[tuple[int, int, int, int]]]) -> None:
        """Apply the masks in place: the bands and spans are set to the training mean (0 after the stem's
        standardisation)."""
        for i, row in enumerate(plan):
            for f0, w, t0, tw in row:
                x[i, :, f0:f0 + w] = self.mean[f0:f0 + w]
                x[i, t0:t0 + tw] = self.mean

    def eval_batches(self) -> Iterable[Batch]:
        size, total = int(self.cfg.eval_batch), self._eval_count()
        if isinstance(self.eval, S.EvalStream):  # one decoded batch at a time
            start = 0
            for x, y, _ in self.eval.batches(size, self._featurize):
                yield Batch(x, y, {"index": torch.arange(start, start + len(y))})
                start += len(y)
            return
        for start in range(0, total, size):
            stop = min(total, start + size)
            yield Batch(self.eval.features[start:stop], self.eval.labels[start:stop],
                        {"index": torch.arange(start, stop)})

    def example_input(self, batch_size: int) -> Tensor:
        x = self._example_pool(batch_size)
        reps = (-(-batch_size // len(x)),) + (1,) * (x.dim() - 1)
        return x.repeat(*reps)[:batch_size]

    def _example_pool(self, batch_size: int) -> Tensor:
        if isinstance(self.eval, S.EvalStream):
            return next(iter(self.eval.batches(min(batch_size, self.eval.count), self._featurize)))[0]
        return self.eval.features[: min(batch_size, len(self.eval))]

    # --- model ------------------------------------------------------------------------------------
    def encoder_config(self, width: float = 1.0, depth: float = 1.0) -> EncoderConfig:
        if self.pretrained:
            return self._checkpoint.shape.encoder_config()
        c = self.cfg
        heads = int(c.heads)
        d_model = max(heads, int(round(int(c.d_model) * width / heads)) * heads)
        return EncoderConfig(d_model=d_model, n_layers=max(1, int(round(int(c.layers) * depth))), n_heads=heads,
                             d_mlp=max(1, int(round(int(c.mlp) * width))), activation="gelu", dropout=0.0,
                             norm_eps=1e-6, pool="mean")

    def build_backbone(self, width: float = 1.0, depth: float = 1.0) -> nn.Module:
        if self.pretrained:
            if width != 1.0 or depth != 1.0:
                raise UserError(f"commonvoice.pretrained: the checkpoint has one size; width={width:g}, "
                                f"depth={depth:g} cannot be built from it (use 1)")
            model = copy.deepcopy(self._checkpoint.model)
            if not self._checkpoint.has_head:
                model.head.proj.reset_parameters()  # a new CTC head, initialised from the run's seed
            return model
        return build_ctc_encoder(self.encoder_config(width, depth), int(self.cfg.n_mels), len(T.VOCAB),
                                 self.mean, self.std)

    def base_config(self) -> dict[str, Any]:
        config = super().base_config()
        if not self.pretrained:
            config.pop("pretrained", None)  # the default model's key is what it was before the option existed
        else:
            config["pretrained_weights"] = self._checkpoint.digest
            config["pretrained_code"] = f"v{P.VERSION}"
        return config

    def base_budget(self) -> dict[str, Any]:
        c = self.cfg
        return {"steps": int(c.train_steps), "batch_size": int(c.batch_size), "lr": float(c.lr),
                "fit": {"weight_decay": float(c.weight_decay), "warmup": int(c.warmup),
                        "grad_clip": float(c.grad_clip) or None}}

    def loss(self, outputs: Tensor, batch: Batch) -> Tensor:
        log_probs = torch.log_softmax(outputs.float(), dim=-1).transpose(0, 1)  # [T, B, V]
        y = batch.y if self.vocab is None else self.vocab.targets(batch.y)
        blank = T.BLANK if self.vocab is None else self.vocab.blank
        valid = y >= 0
        target_lengths = valid.sum(dim=1)
        input_lengths = torch.full((outputs.shape[0],), outputs.shape[1], dtype=torch.long,
                                   device=outputs.device)
        return nn.functional.ctc_loss(log_probs, y[valid], input_lengths, target_lengths, blank=blank,
                                      reduction="mean", zero_infinity=True)

    # --- metric -----------------------------------------------------------------------------------
    def predict(self, outputs: Tensor) -> Tensor:
        return T.greedy_ctc(outputs) if self.vocab is None else self.vocab.greedy(outputs)

    def score(self, predictions: Tensor, targets: Tensor) -> Quality:
        rates = T.error_rates(T.rows_to_text(targets), T.rows_to_text(predictions))
        # per-utterance edit counts: the sufficient statistics of corpus WER/CER (bench/stats.py bootstrap)
        columns = {"cer": np.asarray(rates["per_cer"]), **{k: np.asarray(v) for k, v in rates["counts"].items()}}
        return Quality(float(rates["wer"]), torch.tensor(rates["per_wer"], dtype=torch.float64),
                       extra={"cer": float(rates["cer"])}, columns=columns)

    def sample_table(self, predictions: Tensor, targets: Tensor) -> dict[str, Any]:
        return {"target": T.rows_to_text(targets), "prediction": T.rows_to_text(predictions)}
