#!/usr/bin/env python3
"""Train latent's demo model: a tiny DeepSeek-V3-style MLA MoE on the King James Bible.

Runs on one GPU in a few minutes (development tool, not part of the package; see README.md).

    python3 tools/train-demo/train.py --corpus tools/train-demo/corpus.txt --out OUT [--seconds 170]

Writes to OUT/:
  hf/                 Hugging Face checkpoint: model.safetensors (bf16), config.json, generation_config.json,
                      tokenizer.json, tokenizer_config.json (with a chat template)
  probe.json          transformers' fp32 logits (CPU, eager attention, weights as saved) for fixed probe texts
  tokenizer-cases.json  token ids of a few strings under the trained tokenizer
  greedy.json         transformers' greedy continuations (token ids + text)
  train-log.txt       loss curve, throughput, parameter count
"""
import argparse
import base64
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"

# DeepSeek-V3's pre-tokenizer (llama.cpp pre type "deepseek-v3", applied in order, each match isolated)
DSV3_SPLITS = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}" + USER + "{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}" + ASSISTANT + "{{ message['content'] }}" + EOS +
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)

PROBES = [
    "In the beginning God created the heaven and the earth.",
    "And the king said unto the prophet, Go up to the city, and speak unto the people: for 40 days",
    "Blessed are they that mourn; for they shall be comforted.\nAnd he said,",
]

TOKENIZER_CASES = [
    "And God said, Let there be light: and there was light.",
    "  Hello,   world!\n\nIt's 2025-07-14; price: $1234.5 (approx.)\r\n",
    "Caf\u00e9 na\u00efve \u00fcber \u65e5\u672c\u8a9e \u3053\u3093\u306b\u3061\u306f \U0001F600 tabs\tand\u00a0nbsp",
    BOS + "Thou shalt not" + EOS,
]

GREEDY_PROMPTS = [
    "And it came to pass, when the king",
    "The LORD is my shepherd;",
]


def log(fh, *a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    fh.write(s + "\n")
    fh.flush()


def build_tokenizer(corpus_path, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in DSV3_SPLITS]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS, EOS, USER, ASSISTANT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([corpus_path], trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    return tok


def make_config(vocab_size, args):
    from transformers import DeepseekV3Config

    common = dict(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=640,
        moe_intermediate_size=160,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_shared_experts=1,
        n_routed_experts=8,
        routed_scaling_factor=2.5,
        kv_lora_rank=64,
        q_lora_rank=128,
        qk_rope_head_dim=16,
        v_head_dim=32,
        qk_nope_head_dim=32,
        n_group=1,
        topk_group=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        norm_topk_prob=True,
        hidden_act="silu",
        max_position_embeddings=2048,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        rope_interleave=True,
        attention_bias=False,
    )
    try:
        return DeepseekV3Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    except TypeError:
        return DeepseekV3Config(**common, rope_theta=10000.0, rope_scaling=None)


def moe_layers(model):
    out = []
    for layer in model.model.layers:
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "e_score_correction_bias"):
            out.append(layer.mlp)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=50.0)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    hf_dir = os.path.join(args.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    fh = open(os.path.join(args.out, "train-log.txt"), "w")
    import transformers
    import tokenizers

    log(fh, f"torch {torch.__version__} transformers {transformers.__version__} tokenizers {tokenizers.__version__}")
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    # ---- tokenizer ----
    t0 = time.time()
    tok = build_tokenizer(args.corpus, args.vocab)
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    log(fh, f"tokenizer: {vocab} tokens, bos {bos_id} eos {eos_id}, {time.time() - t0:.1f}s")
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "add_bos_token": True,
                "add_eos_token": False,
                "bos_token": BOS,
                "eos_token": EOS,
                "pad_token": EOS,
                "clean_up_tokenization_spaces": False,
                "legacy": True,
                "model_max_length": 2048,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": CHAT_TEMPLATE,
            },
            f,
            ensure_ascii=False,
            indent=2,
        )

    # ---- data: one token stream, chapters separated by EOS; every sample starts with BOS ----
    text = open(args.corpus, encoding="utf-8").read()
    chapters = [c.strip("\n") for c in text.split("\n\n") if c.strip()]
    encs = tok.encode_batch([c + "\n" for c in chapters], add_special_tokens=False)
    ids, vids = [], []
    for i, e in enumerate(encs):
        dst = vids if i % 50 == 25 else ids  # every 50th chapter is held out for validation
        dst.extend(e.ids)
        dst.append(eos_id)
    train_data = torch.tensor(ids, dtype=torch.long)
    val_data = torch.tensor(vids, dtype=torch.long)
    log(fh, f"data: {len(chapters)} chapters, {len(ids) + len(vids)} tokens ({len(text) / (len(ids) + len(vids)):.2f} chars/token), val {len(vids)}")

    # ---- model ----
    from transformers import DeepseekV3ForCausalLM

    config = make_config(vocab, args)
    dev = torch.device("cuda")
    try:
        config._attn_implementation = "sdpa"
        model = DeepseekV3ForCausalLM(config).to(dev)
    except Exception as e:  # noqa: BLE001
        log(fh, f"sdpa unavailable ({e}); eager")
        config._attn_implementation = "eager"
        model = DeepseekV3ForCausalLM(config).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log(fh, f"model: {n_params} parameters ({n_params / 1e6:.2f} M)")
    log(fh, "state dict keys (first 40):", list(model.state_dict().keys())[:40])

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True,
    )
    moes = moe_layers(model)
    E, K = config.n_routed_experts, config.num_experts_per_tok
    captured = {}

    def pre_hook(mod, inp):
        if mod.training:
            captured[id(mod)] = inp[0].detach()

    for m in moes:
        m.register_forward_pre_hook(pre_hook)

    def balance_bias(rate=1e-3):
        # DeepSeek-V3's auxiliary-loss-free balancing: raise the bias of under-loaded experts, lower over-loaded
        with torch.no_grad():
            for m in moes:
                x = captured.pop(id(m), None)
                if x is None:
                    continue
                x = x.reshape(-1, x.shape[-1]).float()
                s = torch.sigmoid(x @ m.gate.weight.float().t()) + m.gate.e_score_correction_bias.float()
                idx = s.topk(K, dim=-1).indices
                load = torch.bincount(idx.flatten(), minlength=E).float()
                m.gate.e_score_correction_bias.add_(rate * torch.sign(load.mean() - load))

    def batch(src, bs):
        ix = torch.randint(0, len(src) - args.seq, (bs,))
        x = torch.stack([src[i : i + args.seq] for i in ix.tolist()])
        x = torch.cat([torch.full((bs, 1), bos_id, dtype=torch.long), x], dim=1)
        return x.to(dev, non_blocking=True)

    def loss_of(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))

    @torch.no_grad()
    def val_loss():
        model.eval()
        g = torch.Generator().manual_seed(0)
        tot = 0.0
        n = 8
        for _ in range(n):
            ix = torch.randint(0, len(val_data) - args.seq, (args.batch,), generator=g)
            x = torch.stack([val_data[i : i + args.seq] for i in ix.tolist()])
            x = torch.cat([torch.full((args.batch, 1), bos_id, dtype=torch.long), x], dim=1).to(dev)
            tot += loss_of(x).item()
        model.train()
        return tot / n

    model.train()
    warm = 100
    step = 0
    t_start = time.time()
    last = t_start
    tokens = 0
    use_balance = len(moes) > 0
    best = [float("inf"), None]
    while True:
        el = time.time() - t_start
        if el >= args.seconds:
            break
        frac = el / args.seconds
        lr = args.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch(train_data, args.batch)
        loss = loss_of(x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if use_balance:
            try:
                balance_bias()
            except Exception as e:  # noqa: BLE001
                log(fh, f"bias balancing disabled: {e}")
                use_balance = False
        tokens += x.numel()
        step += 1
        if step % 100 == 0 or step == 1:
            now = time.time()
            log(fh, f"step {step} t {now - t_start:.0f}s lr {lr:.2e} loss {loss.item():.4f} ({tokens / (now - t_start) / 1e3:.0f} k tok/s)")
            last = now
        if step % 100 == 0 and step >= 300:
            v = val_loss()
            log(fh, f"step {step} val loss {v:.4f}")
            if v < best[0]:
                best[0] = v
                best[1] = {k: t.detach().clone() for k, t in model.state_dict().items()}
    final_val = val_loss()
    if best[1] is not None and best[0] < final_val:
        log(fh, f"restoring the best checkpoint (val {best[0]:.4f} < {final_val:.4f})")
        model.load_state_dict(best[1])
        final_val = val_loss()
    log(fh, f"done: {step} steps, {tokens} tokens, {time.time() - t_start:.0f}s; final train loss {loss.item():.4f} val loss {final_val:.4f}")
    if moes:
        log(fh, "expert bias layer 1:", moes[0].gate.e_score_correction_bias.tolist())

    # ---- save (bf16, as released checkpoints are) ----
    model.eval()
    model.to(torch.bfloat16)
    model.save_pretrained(hf_dir, safe_serialization=True)
    log(fh, "saved:", sorted(os.listdir(hf_dir)))
    del model, opt
    torch.cuda.empty_cache()

    # ---- fp32 reference from the checkpoint as saved (CPU, eager attention, no TF32) ----
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    try:
        ref = DeepseekV3ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        ref = DeepseekV3ForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    with open(os.path.join(hf_dir, "config.json")) as f:
        log(fh, "config.json:", f.read())

    probes = []
    with torch.no_grad():
        for text in PROBES:
            ids_ = tok.encode(text).ids  # BOS added by the post-processor
            logits = ref(input_ids=torch.tensor([ids_])).logits[0].float().numpy()
            probes.append(
                {
                    "text": text,
                    "tokens": ids_,
                    "shape": list(logits.shape),
                    "logits_f32_base64": base64.b64encode(logits.astype("<f4").tobytes()).decode(),
                }
            )
            log(fh, f"probe {len(ids_)} tokens; argmax {logits.argmax(-1).tolist()}")
    with open(os.path.join(args.out, "probe.json"), "w") as f:
        json.dump({"model": "latent-demo-kjv", "dtype": "float32", "device": "cpu", "attn": "eager", "probes": probes}, f)

    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TOKENIZER_CASES]
    with open(os.path.join(args.out, "tokenizer-cases.json"), "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)

    greedy = []
    with torch.no_grad():
        for p in GREEDY_PROMPTS:
            ids_ = tok.encode(p).ids
            cur = list(ids_)
            for _ in range(48):  # plain recompute loop: no cache, no generate() config surprises
                nxt = int(ref(input_ids=torch.tensor([cur])).logits[0, -1].argmax())
                cur.append(nxt)
                if nxt == eos_id:
                    break
            gen = cur[len(ids_):]
            greedy.append({"prompt": p, "prompt_ids": ids_, "ids": gen, "text": tok.decode(gen, skip_special_tokens=False)})
            log(fh, f"greedy: {p!r} -> {tok.decode(gen)!r}")
    with open(os.path.join(args.out, "greedy.json"), "w") as f:
        json.dump(greedy, f, ensure_ascii=False, indent=1)
    log(fh, "all done")


if __name__ == "__main__":
    main()
