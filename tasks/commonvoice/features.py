"""Audio front-end: 16-bit WAV reading, resampling to 16 kHz, fixed-length clips and log-mel features.

Conventions (torch only; torchaudio does not import with the CPU torch build):
- Sample rate 16 kHz, mono, float32 in [-1, 1].
- STFT: ``n_fft`` = 400 (25 ms), hop 160 (10 ms), periodic Hann window of length ``n_fft``, no centring
  (frame t covers samples [t·hop, t·hop + n_fft)), power spectrum |X|².  Frames = 1 + (n − n_fft) // hop.
- Mel filterbank: HTK mel scale (mel = 2595·log10(1 + f/700)), ``n_mels`` triangles with edges equally
  spaced in mel between 0 Hz and 8 kHz, weights on the FFT bin frequencies k·sr/n_fft, no area
  normalisation (peak 1).
- Features: log(mel power + 1e-6), then standardised per mel bin with the training set's mean and std.
- A clip is the utterance followed by digital silence up to a fixed length (``clip_samples``); the model
  sees every frame of the clip (see tasks/commonvoice/task.py for why).
"""

from __future__ import annotations

import io
import math
import wave
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

SAMPLE_RATE = 16_000
N_FFT = 400
HOP = 160
LOG_FLOOR = 1e-6


def read_wav(source: str | Path | bytes) -> tuple[np.ndarray, int]:
    """(mono float32 samples in [-1, 1], sample rate) of a 16-bit PCM WAV file or its bytes."""
    handle = wave.open(io.BytesIO(source) if isinstance(source, bytes) else str(source), "rb")
    with handle:
        rate, channels, width = handle.getframerate(), handle.getnchannels(), handle.getsampwidth()
        raw = handle.readframes(handle.getnframes())
    if width != 2:
        raise ValueError(f"{source if not isinstance(source, bytes) else 'wav bytes'}: {8 * width}-bit WAV; "
                         "expected 16-bit PCM")
    audio = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        audio = audio.reshape(-1, channels).mean(axis=1)
    return audio, rate


def read_raw_pcm(path: str | Path, rate: int = SAMPLE_RATE) -> tuple[np.ndarray, int]:
    """Headerless 16-bit little-endian mono PCM (pocketsphinx's .raw files)."""
    audio = np.fromfile(str(path), dtype="<i2").astype(np.float32) / 32768.0
    return audio, rate


def resample(audio: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """Polyphase resampling (scipy's Kaiser-windowed FIR) to ``target`` Hz."""
    if rate == target:
        return audio.astype(np.float32)
    from scipy.signal import resample_poly

    ratio = Fraction(target, rate)
    return resample_poly(audio, ratio.numerator, ratio.denominator).astype(np.float32)


def clip(audio: np.ndarray, samples: int) -> np.ndarray:
    """The utterance followed by silence up to ``samples`` (ValueError if it is longer)."""
    if len(audio) > samples:
        raise ValueError(f"utterance of {len(audio)} samples is longer than the clip ({samples})")
    out = np.zeros(samples, dtype=np.float32)
    out[: len(audio)] = audio
    return out


def n_frames(samples: int, n_fft: int = N_FFT, hop: int = HOP) -> int:
    return 1 + (samples - n_fft) // hop


def hz_to_mel(hz: Tensor | float) -> Tensor:
    return 2595.0 * torch.log10(1.0 + torch.as_tensor(hz, dtype=torch.float64) / 700.0)


def mel_to_hz(mel: Tensor) -> Tensor:
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def mel_filterbank(n_mels: int, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> Tensor:
    """[n_fft//2 + 1, n_mels] triangular HTK-mel filters (peak 1) on the FFT bin frequencies."""
    freqs = torch.arange(n_fft // 2 + 1, dtype=torch.float64) * rate / n_fft
    edges = mel_to_hz(torch.linspace(0.0, float(hz_to_mel(rate / 2)), n_mels + 2, dtype=torch.float64))
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (freqs[:, None] - lower) / (centre - lower)
    falling = (upper - freqs[:, None]) / (upper - centre)
    return torch.clamp(torch.minimum(rising, falling), min=0.0).float()


def power_spectrogram(audio: Tensor, n_fft: int = N_FFT, hop: int = HOP) -> Tensor:
    """|STFT|² of [..., samples] → [..., frames, n_fft//2 + 1] (periodic Hann, no centring)."""
    window = torch.hann_window(n_fft, periodic=True, dtype=audio.dtype)
    spec = torch.stft(audio, n_fft=n_fft, hop_length=hop, win_length=n_fft, window=window, center=False,
                      return_complex=True)
    return spec.abs().pow(2).transpose(-1, -2)


def log_mel(audio: Tensor, n_mels: int, n_fft: int = N_FFT, hop: int = HOP) -> Tensor:
    """log(mel power + 1e-6): [..., samples] → [..., frames, n_mels]."""
    power = power_spectrogram(audio, n_fft, hop)
    return torch.log(power @ mel_filterbank(n_mels, n_fft).to(power.dtype) + LOG_FLOOR)


def clips_to_features(clips: np.ndarray, n_mels: int, chunk: int = 256) -> Tensor:
    """[N, samples] clips → [N, frames, n_mels] float32 log-mel (in chunks to bound memory)."""
    out = [log_mel(torch.from_numpy(clips[i:i + chunk]), n_mels) for i in range(0, len(clips), chunk)]
    return torch.cat(out) if out else torch.zeros(0, n_frames(clips.shape[1]), n_mels)


def seconds_to_samples(seconds: float) -> int:
    return int(math.ceil(seconds * SAMPLE_RATE))
