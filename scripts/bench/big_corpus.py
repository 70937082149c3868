#!/usr/bin/env python3
"""Assembles a large corpus of real code (about 1 GB by default) for the indexing scale bench.

It takes, in this order, until the corpus holds MB megabytes of source files:
1. the Rust crates of the local cargo registry cache (scripts/bench/rust_corpus.sh, all of them);
2. the pinned crates below, from static.crates.io;
3. the pinned PyPI source distributions below (the sdist named on pypi.org/simple);
4. the pinned npm packages below, from registry.npmjs.org.
Only files of the code languages below are kept (no data, docs or binaries). The packages
reserved for evaluation (DEVELOPERS.md: the retrieval-learning issue's list) are never fetched.
Everything is pinned, so the same command gives the same corpus. Downloads are kept in
CACHE (default /tmp/big-corpus-downloads) for the next run.

Usage: scripts/bench/big_corpus.py DIR [MB] [--cache CACHE]
"""

import argparse
import io
import os
import re
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

CRATES = [
    ("wasmtime", "48.0.8"), ("cranelift-codegen", "0.135.8"), ("wasmtime-environ", "48.0.8"),
    ("wasmparser", "0.263.0"), ("gix", "0.91.0"), ("gix-odb", "0.88.0"),
    ("polars-core", "0.55.2"), ("polars-plan", "0.55.2"), ("polars-lazy", "0.55.2"),
    ("polars-ops", "0.55.2"), ("datafusion", "55.2.0"), ("datafusion-expr", "55.2.0"),
    ("datafusion-physical-plan", "55.2.0"), ("arrow-array", "60.1.0"), ("arrow-cast", "60.1.0"),
    ("parquet", "60.1.0"), ("sqlparser", "0.64.0"), ("swc_ecma_parser", "47.0.0"),
    ("swc_ecma_minifier", "64.0.0"), ("swc_ecma_transforms_base", "51.0.0"), ("naga", "30.0.2"),
    ("wgpu-core", "30.0.2"), ("wgpu-hal", "30.0.2"), ("bevy_ecs", "0.20.1"),
    ("bevy_render", "0.20.1"), ("rustls", "0.23.46"), ("ring", "0.17.14"),
    ("openssl-src", "400.0.2+4.0.3"), ("libsqlite3-sys", "0.40.0"),
    ("librocksdb-sys", "0.19.0+11.8.1"), ("zstd-sys", "2.1.3+zstd.1.5.7"),
    ("libgit2-sys", "0.18.8+1.9.7"), ("boa_engine", "0.22.0"), ("deno_core", "0.413.0"),
    ("rustpython-vm", "0.6.0"), ("ra_ap_hir_def", "0.0.360"), ("ra_ap_hir_ty", "0.0.358"),
    ("ra_ap_ide", "0.0.358"), ("ra_ap_syntax", "0.0.360"), ("tikv-jemalloc-sys", "0.5.0+5.3.0"),
    ("rquickjs-sys", "0.14.0"), ("lua-src", "551.1.0"), ("luajit-src", "210.7.4+c6ffc14"),
    ("nalgebra", "0.35.0"), ("ndarray", "0.17.2"), ("image", "0.25.10"), ("rav1e", "0.8.1"),
    ("lalrpop", "0.23.2"), ("winit", "0.30.13"), ("egui", "0.37.0"),
]
PYPI = [
    "Django==5.1.4", "sympy==1.13.3", "scipy==1.14.1", "numpy==2.1.3", "pandas==2.2.3",
    "matplotlib==3.9.2", "scikit-learn==1.5.2", "networkx==3.4.2", "SQLAlchemy==2.0.36",
    "Twisted==24.11.0", "astropy==7.0.0", "statsmodels==0.14.4", "ansible-core==2.18.1",
    "Sphinx==8.1.3", "pip==24.3.1", "setuptools==75.6.0", "mypy==1.13.0", "pylint==3.3.2",
    "transformers==4.46.3", "plotly==5.24.1", "salt==3007.1", "bokeh==3.6.1", "dask==2024.11.2",
    "xarray==2024.11.0", "Cython==3.0.11", "pygments==2.18.0", "ipython==8.30.0",
    "hypothesis==6.122.1", "pytest==8.3.4", "celery==5.4.0", "Scrapy==2.12.0",
    "sentry-sdk==2.19.2", "numba==0.60.0", "tornado==6.4.2", "aiohttp==3.11.10", "nltk==3.9.1",
    "docutils==0.21.2", "grpcio==1.68.1",
]
NPM = [
    ("typescript", "5.6.3"), ("three", "0.170.0"), ("@angular/core", "19.0.0"),
    ("rxjs", "7.8.1"), ("webpack", "5.96.1"), ("eslint", "9.15.0"), ("prettier", "3.3.3"),
    ("monaco-editor", "0.52.0"), ("pdfjs-dist", "4.8.69"), ("vue", "3.5.13"),
    ("react-dom", "18.3.1"), ("@babel/parser", "7.26.2"), ("echarts", "5.5.1"), ("d3", "7.9.0"),
    ("next", "15.0.3"), ("aws-sdk", "2.1692.0"), ("@mui/material", "6.1.9"), ("antd", "5.22.3"),
    ("ace-builds", "1.36.5"), ("tinymce", "7.5.1"),
]
RESERVED = {
    "requests", "jinja2", "flask", "httpx", "urllib3", "werkzeug", "rich", "attrs", "pydantic",
    "express", "axios", "koa", "lodash", "commander", "ws", "chalk",
}
CODE_EXTS = {
    ".rs", ".py", ".js", ".ts", ".tsx", ".jsx", ".mjs", ".go", ".c", ".h", ".cc", ".cpp", ".hpp",
    ".java", ".kt", ".rb", ".cs", ".php", ".scala", ".lua", ".sh",
}


def fetch(url, dest):
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=120) as r:
            data = r.read()
        dest.with_suffix(".partial").write_bytes(data)
        dest.with_suffix(".partial").rename(dest)
    return dest


def sdist_url(name, version):
    """The URL of a release's .tar.gz source distribution, from PyPI's simple index."""
    page = urllib.request.urlopen(f"https://pypi.org/simple/{name.lower()}/", timeout=60).read().decode()
    pattern = re.sub(r"[-_.]", "[-_.]", re.escape(name).replace("\\", ""))
    wanted = re.compile(rf'href="([^"#]*/{pattern}-{re.escape(version)}\.tar\.gz)[#"]', re.I)
    match = wanted.search(page)
    if not match:
        raise SystemExit(f"no sdist for {name}=={version} on PyPI")
    return match.group(1)


def members(archive):
    """(relative path, bytes) of the code files of a .tar.gz/.tgz/.crate or .zip archive."""
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if not info.is_dir():
                    yield info.filename, lambda info=info: z.read(info)
        return
    with tarfile.open(archive, "r:*") as t:
        for m in t:
            if m.isfile():
                yield m.name, lambda m=m: t.extractfile(m).read()


class Corpus:
    def __init__(self, root, limit):
        self.root, self.limit, self.total = root, limit, 0

    def full(self):
        return self.total >= self.limit

    def add_archive(self, kind, name, archive):
        for rel, read in members(archive):
            parts = Path(rel).parts
            # No absolute or parent paths out of the corpus, no hidden directories.
            if not parts or any(p in ("..", "") or p.startswith(".") for p in parts):
                continue
            if Path(rel).suffix not in CODE_EXTS or "node_modules" in parts:
                continue
            data = read()
            if len(data) > 1_000_000:  # bundles and generated tables; tabby skips them too
                continue
            dest = self.root / kind / name / Path(*parts[1:] if len(parts) > 1 else parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            self.total += len(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("mb", type=int, nargs="?", default=1000)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/big-corpus-downloads"))
    args = ap.parse_args()
    root = args.dir
    root.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(root, args.mb * 1_000_000)
    here = Path(__file__).resolve().parent
    subprocess.run(["bash", str(here / "rust_corpus.sh"), str(root / "registry"), str(args.mb)],
                   check=True)
    corpus.total = sum(p.stat().st_size for p in (root / "registry").rglob("*.rs"))
    for name, version in CRATES:
        if corpus.full():
            break
        url = f"https://static.crates.io/crates/{name}/{name}-{version}.crate"
        corpus.add_archive("crates", f"{name}-{version}",
                           fetch(url, args.cache / "crates" / f"{name}-{version}.crate"))
    for spec in PYPI:
        if corpus.full():
            break
        name = spec.split("==")[0]
        assert name.lower() not in RESERVED, name
        version = spec.split("==")[1]
        corpus.add_archive("pypi", spec.replace("==", "-"),
                           fetch(sdist_url(name, version), args.cache / "pypi" / f"{name}-{version}.tar.gz"))
    for name, version in NPM:
        if corpus.full():
            break
        assert name not in RESERVED, name
        base = name.split("/")[-1]
        url = f"https://registry.npmjs.org/{name}/-/{base}-{version}.tgz"
        corpus.add_archive("npm", f"{name.replace('/', '__')}-{version}",
                           fetch(url, args.cache / "npm" / f"{base}-{version}.tgz"))
    files = sum(1 for p in root.rglob("*") if p.is_file())
    print(f"{root}: {files} files, {corpus.total / 1e6:.0f} MB of code")
    if not corpus.full():
        print(f"(short of {args.mb} MB: add packages to the lists)", file=os.sys.stderr)


if __name__ == "__main__":
    main()
