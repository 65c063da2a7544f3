#!/usr/bin/python3
"""Write a small random-weight llama-architecture GGUF for benchmarking llama-server.

The weights are random (fixed seed: the file is byte-identical on every run);
only the shapes matter, because sgtune measures serving speed, not text. The
tokenizer is the Llama-2 SPM vocabulary (32000 tokens) copied from llama.cpp's
vocab-only models/ggml-vocab-llama-spm.gguf, so prompts tokenize like a real
Llama-2 model's.

Two things make random weights usable through llama-server's chat endpoint:
  * Residual dimension 0 is a constant "bias" channel: every token embedding has
    0.1 there and no layer writes to it (row 0 of attn_output and ffn_down is
    zero), so output.weight[:, 0] acts as a per-token logit bias.
  * Tokens 0..258 (<unk>, <s>, </s> and the 256 byte-fallback pieces <0x00>..
    <0xFF>) get a bias of -10 * 0.1 * norm gain, far below every other logit:
    no EOS is ever sampled (every request runs to max_tokens, finish_reason
    "length"), and no lone byte token produces invalid UTF-8 (llama-server's
    chat parser answers such output with HTTP 500 "does not match the
    expected peg-native format").

usage: PYTHONPATH=llama.cpp/gguf-py /usr/bin/python3 make_tiny_gguf.py VOCAB.gguf OUT.gguf
           [--n-embd 256] [--n-layer 8] [--n-head 8] [--n-ff 1024] [--n-ctx 4096]
"""
import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, LlamaFileType

# Tokens that must never be sampled: <unk>=0, <s>=1, </s>=2, byte pieces 3..258.
N_BLOCKED = 259


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vocab", help="vocab-only GGUF with a llama SPM tokenizer")
    ap.add_argument("out", help="GGUF file to write")
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-layer", type=int, default=8)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--n-ff", type=int, default=1024)
    ap.add_argument("--n-ctx", type=int, default=4096, help="trained context length written to the metadata")
    a = ap.parse_args()
    if a.n_embd % a.n_head != 0 or (a.n_embd // a.n_head) % 2 != 0:
        ap.error(f"--n-embd {a.n_embd} must be a multiple of 2 * --n-head {a.n_head} (even RoPE head size)")
    for name in ("n_embd", "n_layer", "n_head", "n_ff", "n_ctx"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")

    r = GGUFReader(a.vocab)
    field = lambda k: r.fields[k].contents()
    tokens = field("tokenizer.ggml.tokens")
    scores = field("tokenizer.ggml.scores")
    ttypes = field("tokenizer.ggml.token_type")
    n_vocab = len(tokens)
    if n_vocab <= N_BLOCKED:
        ap.error(f"{a.vocab}: vocabulary of {n_vocab} tokens; want a Llama-2 SPM vocabulary (32000)")
    E, L, H, F = a.n_embd, a.n_layer, a.n_head, a.n_ff

    w = GGUFWriter(a.out, "llama")
    w.add_name(f"sgtune-tiny-llama-E{E}-L{L}")
    w.add_context_length(a.n_ctx)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(H)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(E // H)
    w.add_vocab_size(n_vocab)
    w.add_file_type(LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(ttypes)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    # ChatML: llama-server renders chat requests through it (jinja is on by default).
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

    rng = np.random.default_rng(0)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    # numpy shapes are (rows, cols) = (out, in); GGUF stores them reversed.
    emb = rand(n_vocab, E)
    emb[:, 0] = 0.1
    out_w = rand(n_vocab, E)
    out_w[:, 0] = 0.0
    out_w[:N_BLOCKED, 0] = -10.0
    w.add_tensor("token_embd.weight", emb.astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    w.add_tensor("output.weight", out_w.astype(np.float16))
    n_params = 2 * n_vocab * E + E
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(E, np.float32))
        for t in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(p + t + ".weight", rand(E, E).astype(np.float16))
        wo = rand(E, E)
        wo[0, :] = 0.0  # never write the bias channel
        w.add_tensor(p + "attn_output.weight", wo.astype(np.float16))
        w.add_tensor(p + "ffn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(F, E).astype(np.float16))
        w.add_tensor(p + "ffn_up.weight", rand(F, E).astype(np.float16))
        wd = rand(E, F)
        wd[0, :] = 0.0
        w.add_tensor(p + "ffn_down.weight", wd.astype(np.float16))
        n_params += 4 * E * E + 3 * E * F + 2 * E

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: n_embd {E}, n_layer {L}, n_head {H}, n_ff {F}, n_ctx {a.n_ctx}, "
          f"vocab {n_vocab}, {n_params / 1e6:.1f} M parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
