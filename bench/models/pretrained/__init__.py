"""Loaders of the papers' pretrained checkpoints into the shared skeleton (no task or method names here).

    wav2vec2.py   HuggingFace ``Wav2Vec2ForCTC`` directories (wav2vec 2.0 base, large, XLS-R)
    marian.py     HuggingFace ``MarianMTModel`` directories (opus-mt-de-en)
    fairseq.py    fairseq ``transformer`` checkpoints (checkpoint_best.pt + dict.<lang>.txt)
    hf.py         reading a HuggingFace directory (config.json + model.safetensors / pytorch_model.bin)

Each loader maps the reference's parameter names onto the skeleton's and refuses what it cannot
represent (one-line ``UserError``).  Nothing is ever downloaded: a checkpoint is a directory on disk.
tests/test_pretrained_*.py build tiny random reference models, write them in each on-disk layout, load
them here and compare logits (1e-5, fp32) and greedy decodes with the reference implementation.
"""
