#!/usr/bin/env python3
"""Fine-tunes the BERT sentence encoder (all-MiniLM-L6-v2) contrastively on (doc sentence, the
head of the definition it documents) pairs, for an offline experiment: the encoder's cosine
as a question feature over the ranker's top candidates (`try_nl_feature.py encoder --model
OUT_DIR`; README: "A sentence encoder over the top candidates", session 42). Nothing here
ships.

Data: the nl pairs of the `train` sets of scripts/eval/training_sets.py, less the sets named
in --exclude (the ranker's sets, so that they stay a fair check). The positive is what the
indexer embeds for a definition's chunk: "```path\\nbody\\n```", clipped to 700 bytes and
--doc-tokens tokens; the question is cut at 48 tokens. Each batch holds pairs of one package
only, so the negatives are the package's other definitions. Loss: symmetric InfoNCE with
in-batch negatives, scale 20; AdamW, one pass in a seeded order, stopped after --minutes.

Usage: scripts/eval/train_encoder.py SETS_DIR OUT_DIR [--exclude SPLITS_TSV] [--init MODEL_DIR]
           [--minutes M] [--seed N] [--batch N] [--lr X] [--doc-tokens N] [--lora RANK]
  SETS_DIR: `training_sets.py SETS_DIR --split train --max 100000 --cargo-lock Cargo.lock`.
  OUT_DIR: a model directory the runtime loads (`embed_texts OUT_DIR`, `tabby eval
  --embedding local:OUT_DIR`): the fine-tuned model.safetensors with the source's config and
  tokenizer.
  --init: start from this model directory (default ~/.tabby/models/sentence-transformers/
  all-MiniLM-L6-v2, which `tabby download` fetches); a second pass starts from the first's.
  --lora RANK: freeze the checkpoint and train a rank-RANK change of each dense layer of the
  blocks (scale 2); OUT_DIR then also holds lora.safetensors, the factors alone (what a
  repository could ship), beside the model with them folded in.

Needs torch, safetensors and tokenizers (PyPI). PyPI's Linux torch wheel depends on jinja2, a
package reserved for evaluation, so install it without its dependencies:
  pip install --no-deps torch==2.15.0
  pip install filelock typing-extensions sympy networkx fsspec safetensors \\
    'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.2.2' \\
    nvidia-cudnn-cu13==9.26.0.51 nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.30.7 \\
    nvidia-nvshmem-cu13==3.7.2
(the CUDA libraries only let `import torch` succeed; training runs on the CPU's threads).
"""

import argparse
import json
import os
import random
import shutil
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_embedding import clip_bytes, labelled_pairs  # noqa: E402

HOME = os.environ.get('TABBY_ROOT', os.path.expanduser('~/.tabby'))
SOURCE = os.path.join(HOME, 'models', 'sentence-transformers', 'all-MiniLM-L6-v2')
QUESTION_TOKENS = 48
DOC_BYTES = 700
SCALE = 20.0


class Encoder(torch.nn.Module):
    """BERT with mean pooling, over a checkpoint's own tensor names."""

    def __init__(self, weights, config, lora=0, lora_scale=2.0):
        super().__init__()
        self.hidden = config['hidden_size']
        self.heads = config['num_attention_heads']
        self.layers = config['num_hidden_layers']
        self.eps = config.get('layer_norm_eps', 1e-12)
        # With --lora the checkpoint stays frozen and each dense layer of the blocks learns a
        # low-rank change, scale · B · A (B starts at zero, so training starts from the source).
        self.p = torch.nn.ParameterDict({
            k.replace('.', '__'): torch.nn.Parameter(v.clone(), requires_grad=not lora)
            for k, v in weights.items() if v.dtype == torch.float32})
        self.lora_scale = lora_scale
        self.lora = torch.nn.ParameterDict()
        if lora:
            for k, v in weights.items():
                if k.startswith('encoder.layer.') and k.endswith('.weight') and v.dim() == 2:
                    a = torch.empty(lora, v.shape[1])
                    torch.nn.init.kaiming_uniform_(a, a=5 ** 0.5)
                    name = k[:-len('.weight')].replace('.', '__')
                    self.lora[name + '__A'] = torch.nn.Parameter(a)
                    self.lora[name + '__B'] = torch.nn.Parameter(torch.zeros(v.shape[0], lora))

    def w(self, name):
        return self.p[name.replace('.', '__')]

    def linear(self, x, name):
        y = F.linear(x, self.w(name + '.weight'), self.w(name + '.bias'))
        key = name.replace('.', '__')
        if key + '__A' in self.lora:
            y = y + (x @ self.lora[key + '__A'].T) @ self.lora[key + '__B'].T * self.lora_scale
        return y

    def norm(self, x, name):
        return F.layer_norm(x, (self.hidden,), self.w(name + '.weight'), self.w(name + '.bias'),
                            self.eps)

    def forward(self, ids, mask):
        b, n = ids.shape
        h, d = self.heads, self.hidden // self.heads
        x = (self.w('embeddings.word_embeddings.weight')[ids]
             + self.w('embeddings.position_embeddings.weight')[:n][None]
             + self.w('embeddings.token_type_embeddings.weight')[0])
        x = self.norm(x, 'embeddings.LayerNorm')
        bias = (1.0 - mask[:, None, None, :].float()) * -1e9
        for layer in range(self.layers):
            p = f'encoder.layer.{layer}.'

            def heads(name):
                return self.linear(x, p + name).view(b, n, h, d).transpose(1, 2)

            c = F.scaled_dot_product_attention(heads('attention.self.query'),
                                               heads('attention.self.key'),
                                               heads('attention.self.value'), attn_mask=bias)
            c = c.transpose(1, 2).reshape(b, n, self.hidden)
            x = self.norm(x + self.linear(c, p + 'attention.output.dense'),
                          p + 'attention.output.LayerNorm')
            y = F.gelu(self.linear(x, p + 'intermediate.dense'))
            x = self.norm(x + self.linear(y, p + 'output.dense'), p + 'output.LayerNorm')
        m = mask.unsqueeze(-1).float()
        return F.normalize((x * m).sum(1) / m.sum(1), dim=-1)

    def state(self, weights):
        """The checkpoint with every change folded in."""
        out = dict(weights)
        out.update({k.replace('__', '.'): v.detach().contiguous() for k, v in self.p.items()})
        for key in self.lora:
            if key.endswith('__A'):
                name = key[:-3].replace('__', '.')
                delta = self.lora[key[:-3] + '__B'] @ self.lora[key] * self.lora_scale
                out[name + '.weight'] = (out[name + '.weight'] + delta).detach().contiguous()
        return out

    def delta(self):
        """The low-rank factors alone: `NAME.lora_a` (r × in) and `NAME.lora_b` (out × r)."""
        out = {}
        for key, v in self.lora.items():
            name = key[:-3].replace('__', '.')
            out[name + ('.lora_a' if key.endswith('__A') else '.lora_b')] = v.detach().contiguous()
        return out


def batches_of(sets_dir, exclude, batch, rng):
    names = []
    for line in open(os.path.join(sets_dir, 'splits.tsv'), encoding='utf-8'):
        name, split = line.rstrip('\n').split('\t')[:2]
        if split == 'train' and name not in exclude:
            names.append(name)
    batches, pairs = [], 0
    for name in names:
        ps = [(text, clip_bytes(f'```{path}\n{body}\n```', DOC_BYTES))
              for text, body, path, _, kind in labelled_pairs(os.path.join(sets_dir, name))
              if kind == 'nl']
        if len(ps) < 8:
            continue
        rng.shuffle(ps)
        for i in range(0, len(ps) - 7, batch):
            batches.append(ps[i:i + batch])
            pairs += len(batches[-1])
    rng.shuffle(batches)
    return names, batches, pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('sets_dir')
    ap.add_argument('out_dir')
    ap.add_argument('--exclude', help='a splits.tsv whose sets are left out (the ranker\'s)')
    ap.add_argument('--init', default=SOURCE)
    ap.add_argument('--minutes', type=float, default=40)
    ap.add_argument('--seed', type=int, default=42)
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--lr', type=float, default=3e-5)
    ap.add_argument('--doc-tokens', type=int, default=96)
    ap.add_argument('--lora', type=int, default=0, metavar='RANK',
                    help='train a low-rank change of each dense layer instead of every weight')
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    exclude = set()
    if args.exclude:
        for line in open(args.exclude, encoding='utf-8'):
            parts = line.rstrip('\n').split('\t')
            if len(parts) > 1 and parts[1] == 'train':
                exclude.add(parts[0])
    names, batches, pairs = batches_of(args.sets_dir, exclude, args.batch, rng)
    print(f'{len(names)} sets ({len(exclude)} left out), {pairs} pairs, {len(batches)} batches',
          flush=True)

    weights = load_file(os.path.join(args.init, 'model.safetensors'))
    config = json.load(open(os.path.join(args.init, 'config.json'), encoding='utf-8'))
    model = Encoder(weights, config, args.lora)
    tokenizer = Tokenizer.from_file(os.path.join(args.init, 'tokenizer.json'))
    tokenizer.no_padding()

    def encode(texts, limit):
        tokenizer.enable_truncation(limit)
        enc = tokenizer.encode_batch(texts)
        n = max(len(e.ids) for e in enc)
        ids = torch.zeros(len(enc), n, dtype=torch.long)
        mask = torch.zeros(len(enc), n, dtype=torch.long)
        for i, e in enumerate(enc):
            ids[i, :len(e.ids)] = torch.tensor(e.ids)
            mask[i, :len(e.ids)] = 1
        return model(ids, mask)

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                            weight_decay=0.01)
    start, step, smooth = time.time(), 0, None
    for batch in batches:
        if time.time() - start > args.minutes * 60:
            break
        q = encode([p[0] for p in batch], QUESTION_TOKENS)
        d = encode([p[1] for p in batch], args.doc_tokens)
        scores = q @ d.T * SCALE
        labels = torch.arange(len(batch))
        loss = (F.cross_entropy(scores, labels) + F.cross_entropy(scores.T, labels)) / 2
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        smooth = loss.item() if smooth is None else 0.98 * smooth + 0.02 * loss.item()
        if step % 50 == 0:
            print(f'step {step}/{len(batches)} loss {smooth:.3f} {time.time() - start:.0f} s',
                  flush=True)
    print(f'{step} of {len(batches)} batches in {time.time() - start:.0f} s', flush=True)
    os.makedirs(args.out_dir, exist_ok=True)
    for f in ('config.json', 'tokenizer.json', 'sentence_bert_config.json', 'tabby.json'):
        if os.path.exists(os.path.join(args.init, f)):
            shutil.copy(os.path.join(args.init, f), args.out_dir)
    pooling = os.path.join(args.init, '1_Pooling')
    if os.path.isdir(pooling):
        shutil.copytree(pooling, os.path.join(args.out_dir, '1_Pooling'), dirs_exist_ok=True)
    save_file(model.state(weights), os.path.join(args.out_dir, 'model.safetensors'),
              metadata={'format': 'pt'})
    if args.lora:
        save_file(model.delta(), os.path.join(args.out_dir, 'lora.safetensors'),
                  metadata={'rank': str(args.lora), 'scale': str(model.lora_scale)})
    print('wrote', args.out_dir)


if __name__ == '__main__':
    main()
