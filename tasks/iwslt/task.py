"""Tasks ``iwslt`` and ``wmt``: translation with the encoder–decoder skeleton, BLEU via sacreBLEU.

Batches: ``x`` [B, 2, L] int64 (source ids; decoder input BOS y…), see bench/models/seq2seq.py.
Training ``y`` = the target ids followed by EOS (PAD-padded; loss: label-smoothed cross-entropy ignoring
PAD).  Evaluation ``y`` = the index of the sentence in the evaluation split (references are the raw
strings, never the BPE round trip); evaluation batches are the split sorted by source length (fewer
padded positions), in a fixed order.

``source=hf`` at scale (tasks/iwslt/hfsplit.py): the training split is tokenised into a memory-mapped Arrow
table and a step reads its rows by index (batches still depend on (seed, step) alone); with
``streaming=true`` the evaluation split is a stream read in file order (not sorted by length), tokenised a
batch at a time, ``y`` = the position in the stream, and only the raw source/reference strings are kept.

Inference (``infer``) is beam search (``beam``; 1 = greedy) with a length cap len_a·|x| + len_b.
Metric: sacreBLEU corpus BLEU on detokenized hypotheses against the raw references, its signature in
every row; per-sample score: sentence BLEU.  Cost: MACs per source sentence (encoder, every decoder step
of every beam hypothesis, output projections); the samples table adds ``decoder_macs`` and
``decoder_macs_per_token`` (decoder MACs / tokens of the final hypothesis incl. EOS) and ``out_tokens``.

Static depth (``dense.depth``) scales the *decoder* depth only, as the Depth-Adaptive Transformer's
baselines do (the encoder stays fixed); ``dense.width`` scales d_model and the MLP.

``pretrained=<dir>``: the dense base model is a Marian or fairseq checkpoint (tasks/iwslt/pretrained.py):
its tokenizer/dictionaries replace the BPE, its special ids (pad, decoder start, EOS) are used in batches
and decoding; ``train_steps`` fine-tunes it.  A checkpoint has one size: ``dense.width``/``dense.depth``
other than 1 are refused.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import bench.models.seq2seq as S
from bench import metrics
from bench.api import Batch, Quality, Task
from bench.errors import UserError
from tasks.iwslt import data as D
from tasks.iwslt import hfsplit as H
from tasks.iwslt import pretrained as P


class TranslationTask(Task):
    metric = "bleu"
    higher_is_better = True
    not_base_keys = ("method_steps", "beam", "len_a", "len_b", "len_penalty", "eval_batch", "eval_samples",
                     "eval_split", "streaming")

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.name = run.task_name if run is not None else "iwslt"
        self.source = str(cfg.source)
        self._signature = ""
        self._stream: H.EvalStream | None = None
        if bool(cfg.streaming) and self.source != "hf":
            raise UserError(f"{self.name}.streaming=true streams a HuggingFace split; {self.name}.source="
                            f"{self.source} is read whole (set {self.name}.source=hf or streaming=false)")
        self._phrases = D.Pairs([], [])
        self._valid_pairs: D.Pairs | None = None
        if self.source != "trans-de-en" and int(cfg.ding_phrases):
            raise UserError(f"{self.name}.ding_phrases={cfg.ding_phrases} adds the Ding dictionary's phrases to the "
                            f"offline trans-de-en sentences; with {self.name}.source={self.source} set it to 0")
        if self.source == "trans-de-en":
            path = str(cfg.data_dir) or D.DING_PATH
            splits = D.ding_splits(path, int(cfg.valid_size), int(cfg.test_size))
            if str(cfg.eval_split) not in ("test", "validation"):
                raise UserError(f"{self.name}.eval_split={cfg.eval_split}: trans-de-en has 'test' and 'validation'")
            self._train_pairs, self._eval_pairs = splits["train"], splits[str(cfg.eval_split)]
            self._valid_pairs = splits["validation"] if str(cfg.eval_split) == "test" else None
            if int(cfg.ding_phrases):
                held_out = set(splits["test"].src) | set(splits["validation"].src)
                self._phrases = D.ding_phrases(path, held_out, int(cfg.ding_phrases))
            self._where = "debian trans-de-en" if not cfg.data_dir else path
        elif bool(cfg.streaming):
            ds, self._where = D.open_split(split=str(cfg.eval_split), streaming=True, **self._hf_source)
            self._stream = H.EvalStream(ds, self._columns(ds, self._where), where=self._where,
                                        limit=int(cfg.eval_samples))
        else:
            self._eval_pairs, self._where = D.hf_pairs(split=str(cfg.eval_split), src_lang=str(cfg.src_lang),
                                                       tgt_lang=str(cfg.tgt_lang), **self._hf_source)
        limit = int(cfg.eval_samples)
        if self._stream is None and limit and limit < len(self._eval_pairs):
            self._eval_pairs = D.Pairs(self._eval_pairs.src[:limit], self._eval_pairs.tgt[:limit])
        self.positions = int(cfg.max_tokens) + 2
        self._batch_cache: dict[tuple[int, int], list[np.ndarray]] = {}
        self.checkpoint: P.CheckpointText | None = None
        self.pad, self.bos, self.eos = S.PAD, S.BOS, S.EOS
        if str(cfg.pretrained):
            self.checkpoint = P.load(str(cfg.pretrained), f"{self.name}.pretrained", str(cfg.src_lang),
                                     str(cfg.tgt_lang))
            self.pad, self.bos, self.eos = self.checkpoint.pad, self.checkpoint.bos, self.checkpoint.eos
            self.positions = min(self.positions, self.checkpoint.model.cfg.max_positions)

    # --- data ---------------------------------------------------------------------------------------
    @property
    def _hf_source(self) -> dict[str, str]:
        c = self.cfg
        return dict(data_dir=str(c.data_dir), hf_name=str(c.hf_name), hf_config=str(c.hf_config), task=self.name)

    def _columns(self, ds: Any, where: str) -> D.Columns:
        return D.columns_of(ds, where=where, src_lang=str(self.cfg.src_lang), tgt_lang=str(self.cfg.tgt_lang),
                            task=self.name)

    @functools.cached_property
    def train_pairs(self) -> D.Pairs:
        """trans-de-en: the training pairs as lists (``source=hf`` reads :attr:`_hf_train` instead): the
        sentences (their first ``train_samples``), then the ``ding_phrases`` dictionary phrases."""
        pairs = self._train_pairs
        limit = int(self.cfg.train_samples)
        if limit:
            pairs = D.Pairs(pairs.src[:limit], pairs.tgt[:limit])
        if len(self._phrases):
            pairs = D.Pairs(pairs.src + self._phrases.src, pairs.tgt + self._phrases.tgt)
        return pairs

    @functools.cached_property
    def _hf_train(self) -> tuple[Any, D.Columns]:
        """source=hf: the training split, memory-mapped Arrow (its first ``train_samples`` rows), and its layout."""
        ds, where = D.open_split(split=str(self.cfg.train_split), **self._hf_source)
        cols = self._columns(ds, where)
        limit = int(self.cfg.train_samples)
        return (ds.select(range(limit)) if limit and limit < len(ds) else ds), cols

    @property
    def train_size(self) -> int:
        """Training pairs read (before the ``max_tokens`` filter)."""
        return len(self.train_pairs) if self.source == "trans-de-en" else len(self._hf_train[0])

    @functools.cached_property
    def tokenizer(self):
        if self.source == "trans-de-en":
            pairs = self.train_pairs
            n, first, texts = len(pairs), pairs.src[:3] + pairs.tgt[:3], pairs.src + pairs.tgt
        else:  # the same key and text order (all sources, then all targets) as the lists, read in chunks
            ds, cols = self._hf_train
            src, tgt = cols.texts(ds.select_columns(cols.names)[:3])
            n, first, texts = len(ds), src + tgt, D.text_stream(ds, cols)
        key = {"where": self._where, "n": n, "first": first, "vocab": int(self.cfg.vocab),
               "code": f"v{D.BPE_VERSION}"}
        if len(self._phrases):  # n alone cannot tell N sentences + phrases from N + M sentences (train_samples)
            key["phrases"] = [len(self._phrases), self._phrases.src[:3], self._phrases.tgt[:3]]
        path = self.run.stage_path("tokenizer", f"bpe{int(self.cfg.vocab)}", key).with_suffix(".json")
        return D.train_bpe(texts, int(self.cfg.vocab), path)

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def _src_ids(self, texts: list[str]) -> list[list[int]]:
        return self._ids(texts) if self.checkpoint is None else self.checkpoint.encode_src(texts)

    def _tgt_ids(self, texts: list[str]) -> list[list[int]]:
        return self._ids(texts) if self.checkpoint is None else self.checkpoint.encode_tgt(texts)

    def _tokenizer_digest(self) -> str:
        if self.checkpoint is not None:
            return f"{self.checkpoint.digest}-v{P.VERSION}"
        return hashlib.sha256(self.tokenizer.to_str().encode()).hexdigest()[:16]

    @functools.cached_property
    def _train_rows(self) -> H.TokenizedTrain | _ListRows:
        """The training pairs kept by the max_tokens filter: ``len``, ``lengths`` and ``rows(idx)``."""
        if self.source == "trans-de-en":
            return _ListRows(*self._train_ids)
        ds, cols = self._hf_train
        src, tgt = cols.texts(ds.select_columns(cols.names)[:3])
        key = {"where": self._where, "split": str(self.cfg.train_split), "n": len(ds), "first": src + tgt,
               "columns": [cols.src, cols.tgt, cols.translation], "tokenizer": self._tokenizer_digest(),
               "code": f"v{H.TOKENIZED_VERSION}"}
        path: Path = self.run.stage_path("tokenized", str(self.cfg.train_split), key).with_suffix(".arrow")
        rows = H.TokenizedTrain(ds, cols, encode_src=self._src_ids, encode_tgt=self._tgt_ids, path=path,
                                key=path.stem, max_len=self.positions - 2)
        if not len(rows):
            raise UserError(f"{self.name}: no training pair has at most max_tokens={self.cfg.max_tokens} tokens")
        return rows

    @functools.cached_property
    def _train_ids(self) -> tuple[list[list[int]], list[list[int]]]:
        """trans-de-en: the kept training pairs' ids as lists."""
        pairs = self.train_pairs
        src, tgt = self._src_ids(pairs.src), self._tgt_ids(pairs.tgt)
        keep = [i for i in range(len(src)) if 0 < len(src[i]) <= self.positions - 2
                and 0 < len(tgt[i]) <= self.positions - 2]
        if not keep:
            raise UserError(f"{self.name}: no training pair has at most max_tokens={self.cfg.max_tokens} tokens")
        return [src[i] for i in keep], [tgt[i] for i in keep]

    def validation_task(self) -> "TranslationTask | None":
        """trans-de-en evaluated on its test split: the same task on its validation sentences (the first
        ``eval_samples`` of them, as for the test split); None for other sources and splits."""
        if self._valid_pairs is None:
            return None
        other = copy.copy(self)
        other.__dict__.pop("_eval_ids", None)  # the copy decodes its own sentences
        limit = int(self.cfg.eval_samples) or len(self._valid_pairs)
        other._eval_pairs = D.Pairs(self._valid_pairs.src[:limit], self._valid_pairs.tgt[:limit])
        return other

    @functools.cached_property
    def _eval_ids(self) -> tuple[list[list[int]], np.ndarray]:
        src = self._eval_src(self._eval_pairs.src)
        order = np.array(sorted(range(len(src)), key=lambda i: (len(src[i]), i)), dtype=np.int64)
        return src, order

    @property
    def _eval_texts(self) -> D.Pairs:
        """The raw evaluation texts by index ``y``: the split (map-style), or the rows streamed so far."""
        return self._stream.seen if self._stream is not None else self._eval_pairs

    @property
    def dataset(self) -> str:
        if self._stream is not None:
            limit = int(self.cfg.eval_samples)
            return (f"{self._where} ({self.cfg.src_lang}-{self.cfg.tgt_lang}, {self.cfg.eval_split} streamed"
                    f"{f', first {limit}' if limit else ''})")
        n_eval = len(self._eval_pairs)
        phrases = len(self._phrases)
        train = (f"{len(self.train_pairs) - phrases} train{f' + {phrases} dictionary phrases' if phrases else ''}, "
                 if self.source == "trans-de-en" else "")
        return f"{self._where} ({self.cfg.src_lang}-{self.cfg.tgt_lang}, {train}{self.cfg.eval_split} {n_eval})"

    @property
    def metric_signature(self) -> str:
        if not self._signature:
            from sacrebleu.metrics import BLEU

            bleu = BLEU()
            bleu.corpus_score(["a"], [["a"]])
            self._signature = str(bleu.get_signature())
        output = f"detokenized BPE{int(self.cfg.vocab)} output" if self.checkpoint is None else \
            f"{self.checkpoint.kind} checkpoint output (its tokenizer's decoding)"
        return (f"sacrebleu {self._signature}; {output} vs raw references; "
                f"beam {int(self.cfg.beam)}, len cap {self.cfg.len_a:g}|x|+{int(self.cfg.len_b)}, "
                f"lenpen {self.cfg.len_penalty:g}")

    def _pack(self, src: list[list[int]], tgt_in: list[list[int]] | None, width: int) -> Tensor:
        x = torch.full((len(src), 2, width), self.pad, dtype=torch.long)
        for i, ids in enumerate(src):
            x[i, 0, : len(ids)] = torch.as_tensor(ids)
            if tgt_in is not None:
                x[i, 1, : len(tgt_in[i])] = torch.as_tensor(tgt_in[i])
        return x

    def _epoch_batches(self, epoch: int, batch_size: int) -> list[np.ndarray]:
        """The training batches of one epoch (indices), deterministic in (seed, epoch).

        Length bucketing as in fairseq's batching: shuffle, cut into pools of ``bucket`` batches, sort each
        pool by length, cut it into batches, shuffle the batch order.  Every batch is full: the last
        n mod batch_size pairs of the shuffled epoch are left out of that epoch.
        """
        key = (epoch, batch_size)
        if key not in self._batch_cache:
            rows = self._train_rows
            n = len(rows)
            if n < batch_size:
                raise UserError(f"{self.name}.batch_size={batch_size} is larger than the {n} training pairs")
            lengths = rows.lengths
            rng = np.random.default_rng([self.run.seed, epoch])
            perm = rng.permutation(n)[: n - n % batch_size]
            pool = batch_size * int(self.cfg.bucket)
            batches: list[np.ndarray] = []
            for start in range(0, len(perm), pool):
                chunk = perm[start:start + pool]
                if int(self.cfg.bucket) > 1:
                    chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
                batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
            order = rng.permutation(len(batches)) if int(self.cfg.bucket) > 1 else range(len(batches))
            self._batch_cache = {key: [batches[i] for i in order]}
        return self._batch_cache[key]

    def train_batch(self, step: int, batch_size: int) -> Batch:
        n = len(self._train_rows)
        per_epoch = n // batch_size if n >= batch_size else 1
        epoch, pos = divmod(step, per_epoch)
        idx = self._epoch_batches(epoch, batch_size)[pos]
        s, tgt = self._train_rows.rows(idx)
        t_in = [[self.bos] + t for t in tgt]
        t_out = [t + [self.eos] for t in tgt]
        width = max(max(len(a) for a in s), max(len(a) for a in t_in))
        x = self._pack(s, t_in, width)
        y = torch.full((len(idx), width), self.pad, dtype=torch.long)
        for i, ids in enumerate(t_out):
            y[i, : len(ids)] = torch.as_tensor(ids)
        return Batch(x, y, {"index": torch.as_tensor(idx)})

    def _eval_src(self, texts: list[str]) -> list[list[int]]:
        """Source ids of evaluation sentences, cut to the model's positions."""
        if self.checkpoint is None:
            return [ids[: self.positions - 2] for ids in self._ids(texts)]
        return [P.truncate(ids, self.positions - 2, self.eos) for ids in self._src_ids(texts)]

    def eval_batches(self) -> Iterable[Batch]:
        size = int(self.cfg.eval_batch)
        if self._stream is not None:  # streamed: file order, tokenised as read
            for start, texts in self._stream.batches(size):
                s = [ids or [D.SPECIALS.index("<unk>")] for ids in self._eval_src(texts)]
                idx = torch.arange(start, start + len(s))
                yield Batch(self._pack(s, None, max(len(a) for a in s)), idx, {"index": idx})
            return
        src, order = self._eval_ids
        for start in range(0, len(order), size):
            idx = order[start:start + size]
            s = [src[i] or [D.SPECIALS.index("<unk>")] for i in idx]
            x = self._pack(s, None, max(len(a) for a in s))
            yield Batch(x, torch.as_tensor(idx), {"index": torch.as_tensor(idx)})

    def example_input(self, batch_size: int) -> Tensor:
        x = next(iter(self.eval_batches())).x
        reps = -(-batch_size // len(x))
        return x.repeat(reps, 1, 1)[:batch_size]

    # --- model --------------------------------------------------------------------------------------
    def model_config(self, width: float = 1.0) -> S.Seq2SeqConfig:
        if self.checkpoint is not None:
            return self.checkpoint.model.cfg
        c = self.cfg
        heads = int(c.heads)
        d = max(heads, int(round(int(c.d_model) * width / heads)) * heads)
        if int(c.d_model) % heads:
            raise UserError(f"{self.name}.d_model={c.d_model} is not divisible by {self.name}.heads={heads}")
        dec = 0
        if int(c.dec_d_model):
            if int(c.dec_d_model) % heads:
                raise UserError(f"{self.name}.dec_d_model={c.dec_d_model} is not divisible by "
                                f"{self.name}.heads={heads}")
            dec = max(heads, int(round(int(c.dec_d_model) * width / heads)) * heads)
        return S.Seq2SeqConfig(vocab=self.tokenizer.get_vocab_size(), d_model=d, enc_layers=int(c.enc_layers),
                               dec_layers=int(c.dec_layers), n_heads=heads, d_mlp=max(1, int(round(int(c.mlp) * width))),
                               dropout=float(c.dropout), max_positions=self.positions, dec_d_model=dec)

    def build_backbone(self, width: float = 1.0, depth: float = 1.0) -> nn.Module:
        if self.checkpoint is not None:
            if width != 1.0 or depth != 1.0:
                raise UserError(f"{self.name}.pretrained: the checkpoint has one size; width={width:g}, "
                                f"depth={depth:g} cannot be built from it (use 1)")
            model = copy.deepcopy(self.checkpoint.model)
            self.configure(model)
            return model
        cfg = self.model_config(width)
        model = S.EncoderDecoder(cfg, dec_layers=max(1, int(round(cfg.dec_layers * depth))))
        if bool(self.cfg.tie_output):
            model.decoder.head.weight = model.decoder.embed.tok.weight
        self.configure(model)
        return model

    def configure(self, model: nn.Module) -> None:
        """Decoding settings of this task on a (loaded) encoder–decoder model."""
        c = self.cfg
        model.beam, model.len_a, model.len_b = int(c.beam), float(c.len_a), int(c.len_b)
        model.len_penalty = float(c.len_penalty)

    def base_config(self) -> dict[str, Any]:
        config = super().base_config()  # the encoder–decoder's version is the skeleton's (bench.models.VERSION)
        # Options added later leave the key of a model that does not use them as it was.
        for option in ("pretrained", "dec_d_model", "ding_phrases"):
            if not config.get(option):
                config.pop(option, None)
        if self.checkpoint is not None:
            config.update(pretrained_weights=self.checkpoint.digest, pretrained_code=f"v{P.VERSION}")
        return config

    def base_budget(self) -> dict[str, Any]:
        return {"steps": int(self.cfg.train_steps), "batch_size": int(self.cfg.batch_size), "lr": float(self.cfg.lr),
                "fit": {"warmup": int(self.cfg.warmup), "grad_clip": float(self.cfg.grad_clip) or None}}

    def reference_model(self) -> nn.Module:
        """The trained dense base model (decoding cost depends on the output lengths)."""
        model = self.run.base_model(self)
        self.configure(model)
        return model

    def loss(self, outputs: Tensor, batch: Batch) -> Tensor:
        y = batch.y[:, : outputs.shape[1]]
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]).float(), y.reshape(-1), ignore_index=self.pad,
                               label_smoothing=float(self.cfg.label_smoothing))

    # --- inference and metric -----------------------------------------------------------------------
    def infer(self, model: nn.Module, x: Tensor) -> Tensor:
        if not hasattr(model, "generate"):
            raise UserError(f"{self.name}: the model {type(model).__name__} cannot decode (no generate())")
        return model.generate(x[:, 0])

    def predict(self, outputs: Tensor) -> Tensor:
        return outputs

    def extra_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        dec, length = model.last_decoder_macs, model.last_out_len
        return {"decoder_macs": dec, "out_tokens": length,
                "decoder_macs_per_token": dec / length.clamp(min=1).double()}

    def detokenize(self, predictions: Tensor) -> list[str]:
        if self.checkpoint is not None:
            return self.checkpoint.decode(predictions)
        rows = [[int(t) for t in row if int(t) > D.SPECIALS.index("</s>")] for row in predictions]
        return self.tokenizer.decode_batch(rows, skip_special_tokens=True)

    def score(self, predictions: Tensor, targets: Tensor) -> Quality:
        from sacrebleu.metrics import BLEU

        hyps = self.detokenize(predictions)
        refs = [self._eval_texts.tgt[int(i)] for i in targets]
        bleu = BLEU()
        value = bleu.corpus_score(hyps, [refs]).score
        self._signature = str(bleu.get_signature())
        sentences = metrics.bleu_sentence_scores(hyps, refs)
        per = torch.tensor([score.score for score in sentences], dtype=torch.float64)
        # each sentence's n-gram matches/totals and lengths: the sufficient statistics of corpus BLEU, which
        # a bootstrap over sentences resamples (bench/metrics.py)
        stats = [metrics.sentence_stats(score) for score in sentences]
        return Quality(float(value), per, columns={"bleu_stats": [" ".join(str(int(v)) for v in s) for s in stats]})

    def sample_table(self, predictions: Tensor, targets: Tensor) -> dict[str, Any]:
        texts = self._eval_texts
        return {"target": [texts.tgt[int(i)] for i in targets], "prediction": self.detokenize(predictions),
                "source": [texts.src[int(i)] for i in targets]}


class _ListRows:
    """trans-de-en's kept training pairs as lists, behind the interface of :class:`H.TokenizedTrain`."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]]):
        self.src, self.tgt = src, tgt
        self.lengths = np.array([max(len(a), len(b) + 1) for a, b in zip(src, tgt)])

    def __len__(self) -> int:
        return len(self.src)

    def rows(self, idx: np.ndarray) -> tuple[list[list[int]], list[list[int]]]:
        return [self.src[i] for i in idx], [self.tgt[i] for i in idx]
