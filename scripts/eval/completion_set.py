"""Builds a retrieval set in the format of shared/eval from a Rust, Go or JavaScript/TypeScript
source tree: completion queries (for `tabby eval --mode completion` and the retrieval mode) and
nl queries from doc comments.

Usage: python3 scripts/eval/completion_set.py SRC_DIR OUT_DIR NAME --language rust|go|javascript|typescript
then:  tabby eval --mode completion --queries OUT_DIR/queries.jsonl --corpus OUT_DIR

It follows the completion recipe of shared/eval/README.md ("How it was built") approximately,
with regular expressions and brace matching instead of tree-sitter (stdlib only):

* definitions: functions (and methods) found by a per-language pattern; the range runs from the
  attribute/decorator lines above the definition to its closing brace; definitions over 300
  lines and bodiless declarations are not targets;
* call sites: `name(` / `.name(` / `name::<T>(` in file A of a name defined exactly once in the
  corpus, in file B != A, at least 6 characters, not starting with `test`, not a common method
  name of the standard libraries; never inside a line comment;
* query: the 40 lines before the call line plus the call line up to the callee's name; dropped
  when the name already occurs in that text;
* diversity: at most 2 queries per callee and 6 per query file, at most half from test files,
  seeded sampling (seed 20240601), at most --max queries.

* nl: definitions outside test files with a doc comment right above them (Rust `///`, Go `//`,
  JS/TS `/** */`, attribute lines in between allowed); the query is the first sentence of the
  comment's first paragraph with markup (`code`, [links], {@link x}, @tags) stripped and a
  leading copy of the symbol's name dropped (Go's "Foo returns ..."); under 4 words,
  "Deprecated…", "See…" and "Alias…" are dropped; identical sentences are one query with several
  relevant ranges; at most 15 % of the queries (and at least 1) per file; at most --max-nl. The
  doc comment's lines are blanked in corpus-nodocs/ (line numbers kept).

Writes OUT_DIR/corpus-full/ (the language's files of SRC_DIR, same relative paths),
OUT_DIR/corpus-nodocs/ and OUT_DIR/queries.jsonl.
"""

import argparse
import json
import os
import random
import re
import shutil
import sys

CONTEXT_LINES = 40
SEED = 20240601

EXTS = {
    'rust': ('.rs',),
    'go': ('.go',),
    'javascript': ('.js', '.mjs', '.cjs'),
    'typescript': ('.ts', '.tsx'),
}

IDENT = r'[A-Za-z_$][A-Za-z0-9_$]*'
DEF_PATTERNS = {
    'rust': [re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?'
                        r'(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+(' + IDENT + r')')],
    'go': [re.compile(r'^func\s+(?:\([^)]*\)\s*)?(' + IDENT + r')\s*[\[(]')],
    'javascript': [
        re.compile(r'^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(' + IDENT + r')\s*\('),
        re.compile(r'^\s*(?:export\s+)?(?:const|let|var)\s+(' + IDENT + r')\s*=\s*(?:async\s*)?'
                   r'(?:function\b|\([^)]*\)\s*=>|' + IDENT + r'\s*=>)'),
    ],
}
DEF_PATTERNS['typescript'] = DEF_PATTERNS['javascript'] + [
    re.compile(r'^\s*(?:public\s+|private\s+|protected\s+|static\s+|async\s+|export\s+)*(' + IDENT +
               r')\s*(?:<[^>]*>)?\s*\([^;]*\)\s*(?::\s*[^{;]+)?\{\s*$'),
]
ATTRIBUTE = {
    'rust': re.compile(r'^\s*#!?\['),
    'go': None,
    'javascript': re.compile(r'^\s*@'),
    'typescript': re.compile(r'^\s*@'),
}
KEYWORDS = {'if', 'for', 'while', 'switch', 'catch', 'return', 'function', 'match', 'loop', 'constructor'}

# Names that are methods of the standard libraries or so common that a unique definition in the
# corpus says nothing about which one a call means.
COMMON = set('''
unwrap expect to_string to_owned collect iter_mut into_iter format println eprintln push_str
extend insert remove contains as_ref as_mut borrow borrow_mut is_empty map_err ok_or ok_or_else
and_then unwrap_or unwrap_or_else unwrap_or_default default with_capacity parse write writeln
flush append length toString require exports console Object Promise resolve reject filter
reduce forEach indexOf slice splice concat apply bind call assert assert_eq assert_ne
debug_assert matches unreachable unimplemented vec_deque hashmap btreemap to_vec as_str
as_bytes as_slice as_ptr from_str from_utf8 to_lowercase to_uppercase starts_with ends_with
strip_prefix strip_suffix split_at trim_start trim_end is_some is_none is_ok is_err
get_mut entry or_insert or_default retain truncate reserve capacity sort_by sort_unstable
dedup position cloned copied enumerate flat_map filter_map for_each take_while skip_while
peekable rev zip chain fold any all max_by min_by sum product count last nth step_by
Println Printf Sprintf Errorf Fprintf Fatalf Logf Helper Parallel Contains HasPrefix HasSuffix
TrimSpace Split Join Replace ToLower ToUpper Itoa Atoi Marshal Unmarshal ReadFile WriteFile
Background WithCancel WithTimeout JSON stringify addEventListener removeEventListener
setTimeout clearTimeout setInterval clearInterval querySelector getElementById
createElement appendChild hasOwnProperty defineProperty getPrototypeOf isArray
'''.split())


def is_test(rel, lang):
    base = os.path.basename(rel)
    parts = rel.replace('\\', '/').split('/')
    if any(p in ('tests', 'test', '__tests__', 'testdata', 'benches') for p in parts[:-1]):
        return True
    if lang == 'go':
        return base.endswith('_test.go')
    if lang in ('javascript', 'typescript'):
        return '.test.' in base or '.spec.' in base
    return base == 'tests.rs' or base.endswith('_test.rs')


def code_only(line, state):
    """`line` with string contents and comments blanked, for brace matching. `state` carries an
    open block comment across lines."""
    out = []
    i, n = 0, len(line)
    while i < n:
        if state['block']:
            end = line.find('*/', i)
            if end < 0:
                return ''.join(out)
            state['block'] = False
            i = end + 2
            continue
        c = line[i]
        if line.startswith('//', i):
            break
        if line.startswith('/*', i):
            state['block'] = True
            i += 2
            continue
        if c in '"`':
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == '\\' else 1
            i = j + 1
            continue
        if c == "'" and i + 2 < n and line[i + 2] == "'":
            i += 3  # a one-character literal such as '{'
            continue
        if c == "'" and i + 3 < n and line[i + 1] == '\\' and line[i + 3] == "'":
            i += 4
            continue
        out.append(c)
        i += 1
    return ''.join(out)


def definition_end(lines, start):
    """The 0-based line of the brace that closes the body opened at or after `start`, or None
    for a declaration without a body."""
    state = {'block': False}
    depth = 0
    opened = False
    for k in range(start, min(len(lines), start + 400)):
        code = code_only(lines[k], state)
        for ch in code:
            if ch == '{':
                depth += 1
                opened = True
            elif ch == '}':
                depth -= 1
                if opened and depth == 0:
                    return k
            elif ch == ';' and not opened and depth == 0:
                return None
    return None


def definitions(lines, lang):
    found = []
    for i, line in enumerate(lines):
        for pattern in DEF_PATTERNS[lang]:
            m = pattern.match(line)
            if not m or m.group(1) in KEYWORDS:
                continue
            end = definition_end(lines, i)
            if end is None:
                break
            start = i
            attribute = ATTRIBUTE[lang]
            while attribute and start > 0 and attribute.match(lines[start - 1]):
                start -= 1
            found.append((m.group(1), start + 1, end + 1, i + 1))
            break
    return found


DOC_LINE = {
    'rust': re.compile(r'^\s*///(?!/)\s?(.*)$'),
    'go': re.compile(r'^\s*//(?!go:|nolint|\+build)\s?(.*)$'),
}


def doc_comment(lines, start, lang):
    """(first 0-based line, last 0-based line, text) of the doc comment right above the
    definition whose first line (0-based, attributes included) is `start`, or None."""
    k = start - 1
    if lang in DOC_LINE:
        pattern = DOC_LINE[lang]
        texts = []
        while k >= 0 and pattern.match(lines[k]):
            texts.append(pattern.match(lines[k]).group(1))
            k -= 1
        if not texts:
            return None
        return k + 1, start - 1, '\n'.join(reversed(texts))
    # JS/TS: a /** ... */ block ending on the line above.
    if k < 0 or not lines[k].rstrip().endswith('*/'):
        return None
    end = k
    while k >= 0 and '/**' not in lines[k]:
        if k < end - 200:
            return None
        k -= 1
    if k < 0 or not lines[k].lstrip().startswith('/**'):
        return None
    body = []
    for line in lines[k:end + 1]:
        line = line.strip()
        line = re.sub(r'^/\*\*+', '', line)
        line = re.sub(r'\*+/$', '', line)
        line = re.sub(r'^\*\s?', '', line.strip())
        body.append(line)
    return k, end, '\n'.join(body)


def first_sentence(text, name):
    """The first sentence of the comment's first paragraph, markup stripped, or None."""
    para = []
    for line in text.strip().split('\n'):
        line = line.strip()
        if not line or line.startswith(('@', '#', '```', '-', '*', '|', '>')):
            break
        para.append(line)
    t = ' '.join(para)
    t = re.sub(r'\{@\w+\s+([^}|]*)(?:\|[^}]*)?\}', r'\1', t)
    t = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', t)
    t = re.sub(r'\[`?([^\]`]*)`?\](?:\[[^\]]*\])?', r'\1', t)
    t = t.replace('`', '').replace('**', '')
    m = re.match(r'(.+?[.!?])(?:\s|$)', t)
    if m:
        t = m.group(1)
    t = t.strip()
    words = t.split()
    if words and words[0] in (name, name + "'s"):
        t = ' '.join(words[1:])
        words = t.split()
    if len(words) < 4 or re.match(r'(?i)(deprecated|see\b|alias)', t):
        return None
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('src')
    ap.add_argument('out')
    ap.add_argument('name')
    ap.add_argument('--language', required=True, choices=sorted(EXTS))
    ap.add_argument('--max', type=int, default=100)
    ap.add_argument('--max-nl', type=int, default=110)
    args = ap.parse_args()
    lang = args.language
    src = os.path.abspath(args.src)

    files = {}
    for root, dirs, names in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith('.') and d not in ('target', 'node_modules', 'vendor', 'dist', 'build'))
        for name in sorted(names):
            if not name.endswith(EXTS[lang]) or name.endswith('.d.ts') or '.min.' in name:
                continue
            path = os.path.join(root, name)
            if os.path.getsize(path) > 1_000_000:
                continue
            try:
                with open(path, encoding='utf-8') as f:
                    text = f.read()
            except (UnicodeDecodeError, OSError):
                continue
            files[os.path.relpath(path, src).replace(os.sep, '/')] = text
    if not files:
        sys.exit(f'no {lang} files under {src}')

    defs = {}  # name -> [(rel, start, end)]
    documented = {}  # first sentence -> [(rel, start, end, doc first line, doc last line)]
    for rel, text in files.items():
        lines = text.split('\n')
        for name, start, end, _line in definitions(lines, lang):
            defs.setdefault(name, []).append((rel, start, end))
            if is_test(rel, lang) or end - start + 1 > 300:
                continue
            doc = doc_comment(lines, start - 1, lang)
            sentence = doc and first_sentence(doc[2], name)
            if sentence:
                documented.setdefault(sentence, []).append((rel, start, end, doc[0], doc[1], name))
    unique = {n: d[0] for n, d in defs.items()
              if len(d) == 1 and len(n) >= 6 and not n.lower().startswith('test') and n not in COMMON
              and d[0][2] - d[0][1] < 300}
    if not unique:
        sys.exit('no uniquely named definitions found')
    call = re.compile(r'(?<![A-Za-z0-9_$])(' + '|'.join(re.escape(n) for n in sorted(unique, key=len, reverse=True)) +
                      r')\s*(?:::<[^>()]*>)?\s*\(')
    definition_words = re.compile(r'(?:\bfn|\bfunc|\bfunction)\s+$')

    cases = []
    for rel, text in sorted(files.items()):
        lines = text.split('\n')
        for i, line in enumerate(lines):
            stripped = line.lstrip()
            if stripped.startswith(('//', '*', '/*')):
                continue
            for m in call.finditer(line):
                name = m.group(1)
                target = unique[name]
                if target[0] == rel or definition_words.search(line[:m.start()]):
                    continue
                if '//' in line[:m.start()]:
                    continue
                before = lines[max(0, i - CONTEXT_LINES):i]
                query = '\n'.join(before + [line[:m.start()]])
                if re.search(r'(?<![A-Za-z0-9_$])' + re.escape(name) + r'(?![A-Za-z0-9_$])', query):
                    continue
                cases.append({'rel': rel, 'line': i + 1, 'col': m.start(), 'name': name, 'query': query,
                              'target': target, 'test': is_test(rel, lang)})

    rng = random.Random(SEED)
    rng.shuffle(cases)
    per_callee, per_file, chosen, tests = {}, {}, [], 0
    for c in cases:
        if len(chosen) >= args.max:
            break
        if per_callee.get(c['name'], 0) >= 2 or per_file.get(c['rel'], 0) >= 6:
            continue
        if c['test'] and tests + 1 > args.max // 2:
            continue
        per_callee[c['name']] = per_callee.get(c['name'], 0) + 1
        per_file[c['rel']] = per_file.get(c['rel'], 0) + 1
        tests += c['test']
        chosen.append(c)
    chosen.sort(key=lambda c: (c['rel'], c['line']))

    # nl: one query per distinct sentence, at most 15 % of them (at least one) per file.
    groups = sorted(documented.items())
    rng.shuffle(groups)
    per_doc_file = {}
    doc_files = {g[0] for _, gs in groups for g in gs}
    cap = max(1, int(0.15 * min(args.max_nl, len(groups)) + 0.5)) if len(doc_files) > 6 else args.max_nl
    nl = []
    for sentence, targets in groups:
        if len(nl) >= args.max_nl:
            break
        rel = targets[0][0]
        if per_doc_file.get(rel, 0) >= cap:
            continue
        per_doc_file[rel] = per_doc_file.get(rel, 0) + 1
        nl.append((sentence, targets))
    nl.sort(key=lambda g: (g[1][0][0], g[1][0][1]))
    nodocs = dict(files)
    blank = {}
    for _, targets in nl:
        for rel, _s, _e, d0, d1, _n in targets:
            blank.setdefault(rel, []).append((d0, d1))
    for rel, spans in blank.items():
        lines = files[rel].split('\n')
        for d0, d1 in spans:
            for k in range(d0, d1 + 1):
                lines[k] = ''
        nodocs[rel] = '\n'.join(lines)

    out = os.path.abspath(args.out)
    for sub, tree in (('corpus-full', files), ('corpus-nodocs', nodocs)):
        corpus = os.path.join(out, sub)
        if os.path.exists(corpus):
            shutil.rmtree(corpus)
        if sub == 'corpus-nodocs' and not nl:
            continue
        for rel, text in tree.items():
            dest = os.path.join(corpus, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, 'w', encoding='utf-8') as f:
                f.write(text)
    with open(os.path.join(out, 'queries.jsonl'), 'w', encoding='utf-8') as f:
        for k, (sentence, targets) in enumerate(nl):
            f.write(json.dumps({
                'id': f"{args.name}-nl-{k:04d}", 'set': args.name, 'kind': 'nl', 'language': lang,
                'query': sentence, 'filepath': None, 'corpus': 'nodocs', 'symbol': targets[0][5],
                'relevant': [{'filepath': t[0], 'start_line': t[1], 'end_line': t[2]} for t in targets],
            }) + '\n')
        for k, c in enumerate(chosen):
            rel, start, end = c['target']
            f.write(json.dumps({
                'id': f"{args.name}-cc-{k:04d}", 'set': args.name, 'kind': 'completion', 'language': lang,
                'query': c['query'], 'filepath': c['rel'],
                'relevant': [{'filepath': rel, 'start_line': start, 'end_line': end}],
                'symbol': c['name'], 'corpus': 'full', 'call_line': c['line'],
            }) + '\n')
    print(f"{len(files)} files, {len(unique)} uniquely named definitions, {len(cases)} call sites, "
          f"{len(chosen)} completion queries ({tests} from test files), {len(nl)} nl queries -> {out}")


if __name__ == '__main__':
    main()
