"""Writes a tiny llama-architecture GGUF model (random weights, one layer of
64 wide) around a real tokenizer, for running agentx against
llama-cpp-python's OpenAI-compatible server without any model download.

usage: make_tiny_model.py VOCAB.gguf OUT.gguf

VOCAB.gguf is one of llama.cpp's vocab-only files (`models/ggml-vocab-*.gguf`
in its sources and in llama-cpp-python's sdist): its tokenizer is copied as it
is, so the server counts tokens as the real model family does. Answers are
random tokens; each ends with a small, steady probability (a few dozen tokens
on average), as a chat model's answers do.
"""
import sys

import numpy as np
import gguf
from gguf import GGUFReader, GGUFValueType, GGUFWriter

N_EMBD, N_HEAD, N_LAYER, N_FF = 64, 4, 1, 128
# How strongly the end-of-turn tokens are drawn (0.02: answers of about 80
# tokens at the server's default sampling).
EOS_WEIGHT = 0.02


def main(vocab_path: str, out_path: str) -> None:
    reader = GGUFReader(vocab_path)
    writer = GGUFWriter(out_path, "llama")
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        value = field.contents()
        if kind == GGUFValueType.ARRAY:
            sub = field.types[-1]
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
            if sub == GGUFValueType.STRING:
                writer.add_array(name, value)
            else:
                writer.add_key_value(name, value, kind, sub_type=sub)
        else:
            writer.add_key_value(name, value, kind)
    writer.add_name("agentx-tiny-random")
    writer.add_context_length(4096)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    rng = np.random.default_rng(7)

    def random(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    # Every embedding shares a constant first component and only the
    # end-of-turn tokens' output rows weigh it: each generated token ends
    # the answer with a steady probability, whatever the random rest does.
    embd = random(n_vocab, N_EMBD)
    embd[:, 0] = 1.0
    out = random(n_vocab, N_EMBD)
    out[:, 0] = 0.0
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
        if key in reader.fields:
            out[int(reader.fields[key].contents()), 0] = EOS_WEIGHT
    ones = np.ones(N_EMBD, dtype=np.float32)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", out)
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", random(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", random(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", random(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", random(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
