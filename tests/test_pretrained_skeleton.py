"""The skeleton's new options (norm order, decoder width, checkpoint ids) leave the defaults unchanged.

tests/data/skeleton_golden.pt was written by tests/data/make_skeleton_golden.py on the code before these
options existed; the same models built by the current code must have the same parameter names and shapes,
the same outputs (teacher-forced logits, beam-search tokens) and the same counted and logged MACs.  Since
attention runs through ``F.scaled_dot_product_attention`` the logits equal the golden ones to
fp32 rounding (the fused kernel sums in another order) rather than bitwise; tokens and MACs stay exact.
"""

from pathlib import Path

import torch

from tests.data.make_skeleton_golden import build_all

GOLDEN = Path(__file__).parent / "data" / "skeleton_golden.pt"


def test_default_models_are_unchanged():
    golden = torch.load(GOLDEN, weights_only=True)
    now = build_all()
    assert set(now) == set(golden)
    for name, ref in golden.items():
        cur = now[name]
        assert [tuple(k) for k in cur["keys"]] == [(k, tuple(s)) for k, s in ref["keys"]], name
        torch.testing.assert_close(cur["out"], ref["out"], rtol=1e-5, atol=1e-5, msg=name)
        assert cur["macs"] == ref["macs"], name
    assert torch.equal(now["seq2seq"]["generate"], golden["seq2seq"]["generate"])
    assert torch.equal(now["seq2seq"]["sample_macs"], golden["seq2seq"]["sample_macs"])


def test_post_norm_block_matches_torch_transformer_layer():
    """Post-norm Block = torch.nn.TransformerEncoderLayer(norm_first=False) with the same weights."""
    from bench.models.transformer import Block, EncoderConfig

    torch.manual_seed(0)
    cfg = EncoderConfig(d_model=16, n_heads=4, d_mlp=24, activation="relu", norm_eps=1e-5, norm_first=False)
    block = Block(cfg).eval()
    ref = torch.nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, activation="relu", batch_first=True,
                                           norm_first=False, layer_norm_eps=1e-5).eval()
    with torch.no_grad():
        a = block.attn
        ref.self_attn.in_proj_weight.copy_(torch.cat([a.q.weight, a.k.weight, a.v.weight]))
        ref.self_attn.in_proj_bias.copy_(torch.cat([a.q.bias, a.k.bias, a.v.bias]))
        ref.self_attn.out_proj.weight.copy_(a.o.weight)
        ref.self_attn.out_proj.bias.copy_(a.o.bias)
        for mine, theirs in ((block.mlp.fc1, ref.linear1), (block.mlp.fc2, ref.linear2),
                             (block.norm1, ref.norm1), (block.norm2, ref.norm2)):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
        x = torch.randn(2, 5, 16)
        mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
        torch.testing.assert_close(block(x, mask)[0], ref(x, src_key_padding_mask=mask)[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(block(x, mask)[1, :3], ref(x, src_key_padding_mask=mask)[1, :3], atol=1e-5,
                                   rtol=1e-5)
