#!/usr/bin/env python3
"""Trains the code adapter of the static embedding: one weight per token and one 384 × 384
map, applied to the table that `tabby download` distils from all-MiniLM-L6-v2. A text's
embedding becomes normalise((sum over its tokens t of w[t] · table[t]) · M). The weights act as
a learned importance per word piece (`self`, `return`, `the` weigh little; a rare identifier
piece weighs much), the map turns the space towards what code search needs. 30522 + 147456
numbers, small enough to keep in the repository; the distilled table itself is not shipped.

Data: contrastive pairs of (doc sentence, the definition it documents) and (the lines before
a call, the callee's definition), mined from the `train` sets of
scripts/eval/training_sets.py. Each batch holds pairs of one package only, so the negatives are
the package's other definitions: the choice the index faces. The dev sets are never read.

Usage: scripts/eval/train_code_adapter.py SETS_DIR SOURCE_MODEL_DIR OUT.safetensors
           [--table-out DIR] [--epochs N] [--seed N] [--negatives N] [--only-kind nl|completion|all]
           [--check DEV_SETS_DIR]
  The shipped file (crates/tabby-local/assets/code-adapter.safetensors) is what the defaults
  give on the sets of `scripts/eval/training_sets.py SETS_DIR --split train --max 100000
  --cargo-lock Cargo.lock` (about 6 minutes on two cores).
  SOURCE_MODEL_DIR: the plain distilled table (a folded one is refused), written by
  `cargo run --release -p tabby-local --example distill_plain --
  ~/.tabby/models/sentence-transformers/all-MiniLM-L6-v2 SOURCE_MODEL_DIR`.
  --table-out writes a complete static-embedding model directory with the adapter folded in,
  which `tabby eval --embedding local:DIR` loads, to measure it before it ships.
  --check prints an offline proxy on a dev sets directory: the share of its pairs whose
  definition ranks first / in the top 10 among the set's definitions, by the binarised codes
  the index stores (no training data is read from it).
Needs numpy and tokenizers (PyPI). Seeded; the same inputs give the same file.
"""

import argparse
import json
import os
import random
import struct
import sys
import hashlib

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_embedding import read_table, clip_bytes, labelled_pairs, write_model_dir  # noqa: E402

TAU = 0.05
BATCH = 96
MAX_TOKENS = 512
MAX_DOC_BYTES = 1000


def pairs_of_set(d):
    """(query text, positive text, positive key, kind) for one set, embedding inputs as the
    runtime builds them: the indexer embeds "```path\\nbody\\n```" clipped to 1000 bytes."""
    return [(text, clip_bytes(f"```{path}\n{body}\n```", MAX_DOC_BYTES), key, kind)
            for text, body, path, key, kind in labelled_pairs(d)]


def chunks_of(d, rng, ids, per_file=4, lines=20):
    """Windows of a set's corpus files, embedded like the indexer's chunks: the other code a
    query's definition competes with in the index (tests, bodies, module code)."""
    root = os.path.join(d, 'corpus-nodocs')
    if not os.path.isdir(root):
        root = os.path.join(d, 'corpus-full')
    out = []
    for base, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            path = os.path.join(base, f)
            try:
                text = open(path, encoding='utf-8').read().split('\n')
            except (OSError, UnicodeDecodeError):
                continue
            rel = os.path.relpath(path, root)
            for _ in range(min(per_file, 1 + len(text) // lines)):
                start = rng.randrange(max(1, len(text) - lines))
                body = '\n'.join(text[start:start + lines])
                x = ids(clip_bytes(f"```{rel}\n{body}\n```", MAX_DOC_BYTES))
                if len(x):
                    out.append(x)
    return out


def read_splits(sets_dir):
    splits = {}
    for line in open(os.path.join(sets_dir, 'splits.tsv')):
        parts = line.rstrip('\n').split('\t')
        splits[parts[0]] = parts[1]
    return splits


class Model:
    def __init__(self, table0):
        self.e0 = table0
        v, d = table0.shape
        self.w = np.ones(v, dtype=np.float32)
        self.m = np.eye(d, dtype=np.float32)

    def sums(self, texts):
        return np.stack([(self.w[x][:, None] * self.e0[x]).sum(0) for x in texts])

    def embed(self, texts):
        s = self.sums(texts)
        z = s @ self.m
        n = np.linalg.norm(z, axis=1, keepdims=True) + 1e-9
        return s, z, n


def softmax(x):
    x = x - x.max(1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(1, keepdims=True)


def train(model, epochs_of_batches, rng, lr_w, lr_m, reg):
    state = {}

    def adam(name, param, grad, lr, t):
        m, v = state.get(name, (np.zeros_like(param), np.zeros_like(param)))
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        state[name] = (m, v)
        param -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)

    t = 0
    for epoch, batches in enumerate(epochs_of_batches):
        rng.shuffle(batches)
        total = 0.0
        for qa, db in batches:
            t += 1
            b = len(qa)
            sq, zq, nq = model.embed(qa)
            sd, zd, nd = model.embed(db)
            eq, ed = zq / nq, zd / nd
            logits = eq @ ed.T / TAU
            p1 = softmax(logits)
            p2 = softmax(logits[:, :b].T)
            idx = np.arange(b)
            total += -(np.log(p1[idx, idx] + 1e-12).mean() + np.log(p2[idx, idx] + 1e-12).mean()) / 2
            target = np.zeros_like(p1)
            target[idx, idx] = 1.0
            g = (p1 - target) / b / 2 / TAU
            g[:, :b] += (p2 - np.eye(b)).T / b / 2 / TAU
            g_eq, g_ed = g @ ed, g.T @ eq
            g_zq = (g_eq - (g_eq * eq).sum(1, keepdims=True) * eq) / nq
            g_zd = (g_ed - (g_ed * ed).sum(1, keepdims=True) * ed) / nd
            g_m = sq.T @ g_zq + sd.T @ g_zd + reg * (model.m - np.eye(model.m.shape[0]))
            g_sq, g_sd = g_zq @ model.m.T, g_zd @ model.m.T
            g_w = np.zeros_like(model.w)
            for x, gs in list(zip(qa, g_sq)) + list(zip(db, g_sd)):
                np.add.at(g_w, x, model.e0[x] @ gs)
            touched = g_w != 0
            g_w[touched] += reg * (model.w[touched] - 1.0)
            adam('m', model.m, g_m.astype(np.float32), lr_m, t)
            adam('w', model.w, g_w.astype(np.float32), lr_w, t)
        print(f'epoch {epoch + 1}: loss {total / max(1, len(batches)):.4f}', file=sys.stderr)


def batches_of(per_set, rng, negatives=None, n_neg=0):
    """Batches of one package each, BATCH pairs at most; a package's remainder under 16 pairs
    is dropped from that epoch (too few negatives to teach anything). With `negatives`, each
    batch's documents are followed by `n_neg` other chunks of the same package."""
    out = []
    for si, pairs in enumerate(per_set):
        order = list(range(len(pairs)))
        rng.shuffle(order)
        # One positive per definition in a batch: two queries of one callee are not negatives.
        for start in range(0, len(order), BATCH):
            chunk = order[start:start + BATCH]
            seen = set()
            qa, db = [], []
            for i in chunk:
                a, b, key = pairs[i]
                if key in seen:
                    continue
                seen.add(key)
                qa.append(a)
                db.append(b)
            if len(qa) >= 16:
                if negatives and negatives[si]:
                    pool = negatives[si]
                    db = db + [pool[rng.randrange(len(pool))] for _ in range(n_neg)]
                out.append((qa, db))
    return out


def check(model, dev_sets, label):
    """Offline proxy on dev sets: rank of each query's definition among its set's definitions,
    by Hamming distance of the sign bits (what the index stores)."""
    for kind in ('nl', 'code'):
        hit1 = hit10 = n = 0
        for texts, docs, keys in dev_sets[kind]:
            uniq = sorted(set(keys))
            pos = {k: i for i, k in enumerate(uniq)}
            first = {}
            for d, k in zip(docs, keys):
                first.setdefault(k, d)
            _, zq, _ = model.embed(texts)
            _, zd, _ = model.embed([first[k] for k in uniq])
            bq, bd = zq > 0, zd > 0
            sim = (bq[:, None, :] == bd[None, :, :]).sum(2)
            for i, k in enumerate(keys):
                j = pos[k]
                rank = (sim[i] > sim[i, j]).sum()
                n += 1
                hit1 += rank == 0
                hit10 += rank < 10
        print(f'{label} {kind}: top1 {hit1 / max(n, 1):.3f} top10 {hit10 / max(n, 1):.3f} (n={n})',
              file=sys.stderr)


PROBE_TOKENS = 16


def write_adapter(path, w, m, table0, source_sha):
    """safetensors: `token_weights` (vocab), `map` (d × d), and the probe the runtime checks
    its distilled table against before it folds the adapter in: `probe_ids` and their rows of
    the table the adapter was trained on, `probe_rows`."""
    kept = np.flatnonzero(np.linalg.norm(table0, axis=1) > 0)
    probe = kept[np.linspace(0, len(kept) - 1, PROBE_TOKENS).astype(np.int64)]
    blobs = [('token_weights', w.astype('<f4')), ('map', m.astype('<f4')),
             ('probe_ids', probe.astype('<i8')), ('probe_rows', table0[probe].astype('<f4'))]
    header = {'__metadata__': {'format': 'tabby-static-adapter', 'version': '1',
                               'table_sha256': source_sha}}
    off = 0
    data = b''
    for name, arr in blobs:
        b = arr.tobytes()
        dtype = 'I64' if arr.dtype.kind == 'i' else 'F32'
        header[name] = {'dtype': dtype, 'shape': list(arr.shape), 'data_offsets': [off, off + len(b)]}
        off += len(b)
        data += b
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('sets_dir')
    ap.add_argument('source')
    ap.add_argument('out')
    ap.add_argument('--table-out')
    ap.add_argument('--epochs', type=int, default=8)
    ap.add_argument('--seed', type=int, default=20261205)
    ap.add_argument('--lr-w', type=float, default=1e-2)
    ap.add_argument('--lr-m', type=float, default=1e-3)
    ap.add_argument('--reg', type=float, default=1e-3)
    ap.add_argument('--check')
    ap.add_argument('--only-kind', choices=('nl', 'completion', 'all'), default='nl',
                    help='which pairs to train on (default nl: the completion pairs, the '
                    'lines before a call against the callee, made the dev sets worse)')
    ap.add_argument('--negatives', type=int, default=64,
                    help="other chunks of the package added to each batch's documents")
    args = ap.parse_args()
    rng = random.Random(args.seed)

    header = json.load(open(os.path.join(args.source, 'static-embedding.json')))
    if header.get('code_adapter'):
        sys.exit(f'{args.source} holds a table with a code adapter folded in already; the adapter '
                 'is trained on the plain distilled table (a header without "code_adapter")')
    table0 = read_table(os.path.join(args.source, 'static-embedding.safetensors'))
    tok = Tokenizer.from_file(os.path.join(args.source, 'tokenizer.json'))
    tok.no_truncation()
    tok.no_padding()
    cache = {}

    def ids(text):
        if text not in cache:
            cache[text] = np.array(tok.encode(text, add_special_tokens=False).ids[:MAX_TOKENS],
                                   dtype=np.int64)
        return cache[text]

    splits = read_splits(args.sets_dir)
    per_set = []
    set_names = []
    total = 0
    for name in sorted(n for n, s in splits.items() if s == 'train'):
        pairs = []
        for a, b, key, kind in pairs_of_set(os.path.join(args.sets_dir, name)):
            if args.only_kind != 'all' and kind != args.only_kind:
                continue
            x, y = ids(a), ids(b)
            if len(x) and len(y):
                pairs.append((x, y, key))
        if pairs:
            per_set.append(pairs)
            set_names.append(name)
            total += len(pairs)
    print(f'{total} pairs from {len(per_set)} training sets', file=sys.stderr)
    negatives = None
    if args.negatives:
        negatives = [chunks_of(os.path.join(args.sets_dir, name), rng, ids)
                     for name in set_names]

    dev = None
    if args.check:
        dev = {'nl': [], 'code': []}
        dsplits = read_splits(args.check)
        for name in sorted(n for n, s in dsplits.items() if s == 'dev'):
            got = pairs_of_set(os.path.join(args.check, name))
            for kind, label in (('nl', 'nl'), ('completion', 'code')):
                sel = [(ids(a), ids(b), k) for a, b, k, kd in got if kd == kind]
                sel = [s for s in sel if len(s[0]) and len(s[1])]
                if len(sel) >= 10:
                    dev[label].append(([s[0] for s in sel], [s[1] for s in sel],
                                       [s[2] for s in sel]))

    model = Model(table0)
    if dev:
        check(model, dev, 'distilled')
    batches = []
    for _ in range(args.epochs):
        batches.append(batches_of(per_set, rng, negatives, args.negatives))
    train(model, batches, rng, args.lr_w, args.lr_m, args.reg)
    if dev:
        check(model, dev, 'adapted')

    source_sha = hashlib.sha256(
        open(os.path.join(args.source, 'static-embedding.safetensors'), 'rb').read()).hexdigest()
    write_adapter(args.out, model.w, model.m, table0, source_sha)
    print(f'wrote {args.out}', file=sys.stderr)
    if args.table_out:
        write_model_dir(args.table_out, args.source, (model.w[:, None] * table0) @ model.m)


if __name__ == '__main__':
    main()
