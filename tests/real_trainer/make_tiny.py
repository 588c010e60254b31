"""Make the real-trainer tier's model, tokenizer and data at test time (run with the trainer environment's
Python): nothing binary is committed, and nothing is downloaded.

* a tokenizer: byte-level BPE trained here with ``tokenizers`` on the prompts themselves, with the chat
  template verl applies (``apply_chat_template``) and Qwen's special tokens;
* a model: a randomly initialised Qwen3 of about 0.35 M parameters, head_dim 64 (vLLM's CPU attention
  refuses 16), saved with ``save_pretrained`` (safetensors);
* data: gsm8k-style rows in verl's RL parquet schema (``prompt`` as chat messages, ``data_source``
  ``openai/gsm8k``, ``reward_model.ground_truth``), train and validation.

    python make_tiny.py OUT_DIR [--rows N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SOURCE = "openai/gsm8k"


def problems(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        out.append((f"Tom has {a} apples and buys {b} more. How many apples does he have?", str(a + b)))
    return out


def tokenizer(out: Path, texts: list[str]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def model(out: Path, vocab: int, seed: int) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=None,
        torch_dtype="bfloat16",
    )
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)


def rows(pairs: list[tuple[str, str]], split: str) -> list[dict[str, object]]:
    return [
        {
            "data_source": SOURCE,
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": i},
        }
        for i, (question, answer) in enumerate(pairs)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import pandas as pd
    from transformers import AutoTokenizer

    train, val = problems(args.rows, args.seed), problems(8, args.seed + 1)
    model_dir = args.out / "model"
    tokenizer(model_dir, [q for q, _ in train + val] * 4)
    vocab = len(AutoTokenizer.from_pretrained(model_dir))
    model(model_dir, vocab, args.seed)
    config = json.loads((model_dir / "config.json").read_text())
    tok = AutoTokenizer.from_pretrained(model_dir)
    config["eos_token_id"] = tok.convert_tokens_to_ids("<|im_end|>")
    config["pad_token_id"] = tok.convert_tokens_to_ids("<|endoftext|>")
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))
    data = args.out / "data"
    data.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows(train, "train")).to_parquet(data / "train.parquet")
    pd.DataFrame(rows(val, "test")).to_parquet(data / "validation.parquet")


if __name__ == "__main__":
    main()
