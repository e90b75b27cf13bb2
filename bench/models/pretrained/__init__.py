"""Reading pretrained checkpoints from disk (no task or method names here).

    hf.py         reading a HuggingFace directory (config.json + model.safetensors / pytorch_model.bin)

The loaders that map a reference model's parameter names onto the shared skeleton live with the task that
uses them (tasks/commonvoice/wav2vec2.py: HuggingFace ``Wav2Vec2ForCTC``; tasks/iwslt/marian.py and
fairseq.py: ``MarianMTModel`` and fairseq ``transformer`` checkpoints).  Each refuses what it cannot
represent (one-line ``UserError``).  Nothing is ever downloaded: a checkpoint is a directory on disk.
tests/test_pretrained_*.py build tiny random reference models, write them in each on-disk layout, load
them and compare logits (1e-5, fp32) and greedy decodes with the reference implementation.
"""
