#!/usr/bin/env python3
"""Fine-tunes the static embedding table (the default embedding, distilled from
all-MiniLM-L6-v2 by `tabby download`) on code: contrastive pairs of (doc sentence, the
definition it documents) and (the lines before a call, the callee's definition), mined from the
`train` sets of scripts/eval/training_sets.py. Writes a complete static-embedding model
directory that `tabby eval --embedding local:DIR` and `[model.embedding.local] model_id = DIR`
load like the distilled one.

Usage: scripts/eval/train_embedding.py SETS_DIR SOURCE_MODEL_DIR OUT_DIR [--epochs N] [--seed N]
  SOURCE_MODEL_DIR: ~/.tabby/models/sentence-transformers/all-MiniLM-L6-v2-static
Needs numpy and tokenizers (PyPI).

A text's embedding is what the runtime computes: the sum of its tokens' rows (no special
tokens, at most 512 tokens), L2-normalised. The loss is InfoNCE with in-batch negatives in both
directions (temperature TAU), plus an L2 pull of every row towards its distilled value, so the
words the pairs never show keep their meaning. Sparse Adam on the rows a batch touches.
Seeded; the same inputs give the same table.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import struct
import sys

import numpy as np
from tokenizers import Tokenizer

TAU = 0.05
BATCH = 128
LR = 2e-3
ANCHOR = 1e-2
MAX_TOKENS = 512
MAX_DOC_BYTES = 1000  # what the indexer embeds of a chunk ([embedding] max_input_length)
CODE_QUERY_LINES = 10  # what the tuned strategy embeds of an editor prefix


def read_table(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header['embeddings']
    start, end = meta['data_offsets']
    assert meta['dtype'] == 'F16', meta['dtype']
    return np.frombuffer(data[start:end], dtype='<f2').reshape(meta['shape']).astype(np.float32)


def write_table(path, table):
    blob = table.astype('<f2').tobytes()
    header = {'embeddings': {'dtype': 'F16', 'shape': list(table.shape),
                             'data_offsets': [0, len(blob)]}}
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        f.write(blob)


def write_model_dir(out, source, table):
    """A static-embedding model directory at `out` holding `table`, with the tokenizer and
    metadata of model directory `source` (the header's table hash made anew)."""
    os.makedirs(out, exist_ok=True)
    table_path = os.path.join(out, 'static-embedding.safetensors')
    write_table(table_path, table)
    shutil.copy(os.path.join(source, 'tokenizer.json'), out)
    if os.path.exists(os.path.join(source, 'tabby.json')):
        shutil.copy(os.path.join(source, 'tabby.json'), out)
    header = json.load(open(os.path.join(source, 'static-embedding.json')))
    header['table_sha256'] = hashlib.sha256(open(table_path, 'rb').read()).hexdigest()
    with open(os.path.join(out, 'static-embedding.json'), 'w') as f:
        json.dump(header, f, indent=2)
    print(f'wrote {out}', file=sys.stderr)


def clip_bytes(text, n):
    b = text.encode('utf-8')[:n]
    return b.decode('utf-8', 'ignore')


def last_lines(text, n):
    return '\n'.join(text.split('\n')[-n:])


def labelled_pairs(d):
    """(query text, definition body, its file path, (corpus, path, start line), kind) for each
    labelled query of set directory `d`: nl queries pair with the nodocs corpus, completion
    queries (their last CODE_QUERY_LINES lines) with the full one."""
    path = os.path.join(d, 'queries.jsonl')
    if not os.path.exists(path):
        return []
    out = []
    cache = {}
    for line in open(path, encoding='utf-8'):
        q = json.loads(line)
        corpus = 'corpus-nodocs' if q['kind'] == 'nl' else 'corpus-full'
        for r in q['relevant'][:1]:
            key = (corpus, r['filepath'])
            if key not in cache:
                try:
                    cache[key] = open(os.path.join(d, corpus, r['filepath']),
                                      encoding='utf-8').read().split('\n')
                except OSError:
                    cache[key] = None
            lines = cache[key]
            if not lines:
                continue
            body = '\n'.join(lines[r['start_line'] - 1:r['end_line']])
            text = q['query'] if q['kind'] == 'nl' else last_lines(q['query'], CODE_QUERY_LINES)
            out.append((text, body, r['filepath'], (corpus, r['filepath'], r['start_line']),
                        q['kind']))
    return out


def pairs_from(sets_dir, names):
    """(query text, positive text) pairs from the sets' labels."""
    return [(text, clip_bytes(body, MAX_DOC_BYTES))
            for name in names
            for text, body, _, _, _ in labelled_pairs(os.path.join(sets_dir, name))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('sets_dir')
    ap.add_argument('source')
    ap.add_argument('out')
    ap.add_argument('--epochs', type=int, default=4)
    ap.add_argument('--seed', type=int, default=20241201)
    ap.add_argument('--lr', type=float, default=LR)
    ap.add_argument('--anchor', type=float, default=ANCHOR)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    splits = {}
    for line in open(os.path.join(args.sets_dir, 'splits.tsv')):
        parts = line.rstrip('\n').split('\t')
        splits[parts[0]] = parts[1]
    train_sets = sorted(n for n, s in splits.items() if s == 'train')
    pairs = pairs_from(args.sets_dir, train_sets)
    print(f'{len(pairs)} pairs from {len(train_sets)} training sets', file=sys.stderr)

    table0 = read_table(os.path.join(args.source, 'static-embedding.safetensors'))
    table = table0.copy()
    tok = Tokenizer.from_file(os.path.join(args.source, 'tokenizer.json'))
    tok.no_truncation()
    tok.no_padding()

    def ids(text):
        return tok.encode(text, add_special_tokens=False).ids[:MAX_TOKENS]

    encoded = [(np.array(ids(a), dtype=np.int64), np.array(ids(b), dtype=np.int64))
               for a, b in pairs]
    encoded = [(a, b) for a, b in encoded if len(a) and len(b)]
    m = np.zeros_like(table)
    v = np.zeros_like(table)
    steps = np.zeros(table.shape[0], dtype=np.int64)
    b1, b2, eps = 0.9, 0.999, 1e-8

    def embed(batch):
        sums = np.stack([table[x].sum(0) for x in batch])
        norms = np.linalg.norm(sums, axis=1, keepdims=True) + 1e-9
        return sums / norms, norms

    for epoch in range(args.epochs):
        order = list(range(len(encoded)))
        rng.shuffle(order)
        total = 0.0
        for start in range(0, len(order) - BATCH + 1, BATCH):
            batch = [encoded[i] for i in order[start:start + BATCH]]
            qa = [a for a, _ in batch]
            db = [b for _, b in batch]
            eq, nq = embed(qa)
            ed, nd = embed(db)
            logits = eq @ ed.T / TAU
            labels = np.arange(len(batch))
            # Both directions' softmax cross-entropy.
            def softmax(x):
                x = x - x.max(1, keepdims=True)
                e = np.exp(x)
                return e / e.sum(1, keepdims=True)
            p1 = softmax(logits)
            p2 = softmax(logits.T)
            loss = -(np.log(p1[labels, labels] + 1e-12).mean() +
                     np.log(p2[labels, labels] + 1e-12).mean()) / 2
            total += loss
            g = (p1 - np.eye(len(batch))) / len(batch) / 2
            g2 = (p2 - np.eye(len(batch))) / len(batch) / 2
            g_logits = (g + g2.T) / TAU
            g_eq = g_logits @ ed
            g_ed = g_logits.T @ eq
            # Through the normalisation: d e / d s = (I - e e^T) / |s|.
            g_sq = (g_eq - (g_eq * eq).sum(1, keepdims=True) * eq) / nq
            g_sd = (g_ed - (g_ed * ed).sum(1, keepdims=True) * ed) / nd
            grad = {}
            for x, gs in list(zip(qa, g_sq)) + list(zip(db, g_sd)):
                uniq, counts = np.unique(x, return_counts=True)
                for t, c in zip(uniq.tolist(), counts.tolist()):
                    if t in grad:
                        grad[t] += c * gs
                    else:
                        grad[t] = c * gs
            rows = np.fromiter(grad.keys(), dtype=np.int64)
            gr = np.stack([grad[t] for t in rows.tolist()])
            gr += args.anchor * (table[rows] - table0[rows])
            steps[rows] += 1
            m[rows] = b1 * m[rows] + (1 - b1) * gr
            v[rows] = b2 * v[rows] + (1 - b2) * gr * gr
            t = steps[rows][:, None]
            mh = m[rows] / (1 - b1 ** t)
            vh = v[rows] / (1 - b2 ** t)
            table[rows] -= args.lr * mh / (np.sqrt(vh) + eps)
        n = max(1, len(order) // BATCH)
        print(f'epoch {epoch + 1}: loss {total / n:.4f}', file=sys.stderr)

    write_model_dir(args.out, args.source, table)


if __name__ == '__main__':
    main()
